//go:build !(goexperiment.simd && amd64)

package model

func sumLanes(x []float32) float32                { return sumLanesRef(x) }
func dotLanes(a, b []float32) float32             { return dotLanesRef(a, b) }
func scaleMax(x []float32, scale float32) float32 { return scaleMaxRef(x, scale) }
func addScalar(x []float32, c float32)            { addScalarRef(x, c) }

func negate(dst, src []float32)                        { negateRef(dst, src) }
func swigluRow(act, sr, gate, up []float32)            { swigluRowRef(act, sr, gate, up) }
func swigluBackRow(dg, du, da, gate, up, sr []float32) { swigluBackRowRef(dg, du, da, gate, up, sr) }
func rmsnormBackRow(dx, dg, dy, x, g []float32, s, c float32) {
	rmsnormBackRowRef(dx, dg, dy, x, g, s, c)
}
