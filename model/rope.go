package model

import (
	"fmt"
	"math"
)

// invFreq returns RoPE's inverse frequencies (hd/2 of them) and the factor
// cos and sin are multiplied by (yarn's attention factor, else 1), as
// transformers' rope initialisation functions define them (computed here
// in float64 and rounded once at the end).
func invFreq(c Config) ([]float64, float64, error) {
	hd := c.HeadDim
	half := hd / 2
	base := make([]float64, half)
	for i := range base {
		base[i] = 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(hd))
	}
	rs := c.RopeScaling
	if rs == nil || rs.Type == "default" {
		return base, 1, nil
	}
	switch rs.Type {
	case "linear":
		for i := range base {
			base[i] /= rs.Factor
		}
		return base, 1, nil
	case "llama3":
		old := float64(rs.OrigMaxPos)
		lowWave, highWave := old/rs.LowFreqFactor, old/rs.HighFreqFactor
		for i, f := range base {
			wave := 2 * math.Pi / f
			switch {
			case wave < highWave: // high frequency: kept
			case wave > lowWave: // low frequency: interpolated
				base[i] = f / rs.Factor
			default: // in between: a smooth mix
				s := (old/wave - rs.LowFreqFactor) / (rs.HighFreqFactor - rs.LowFreqFactor)
				base[i] = (1-s)*f/rs.Factor + s*f
			}
		}
		return base, 1, nil
	case "yarn":
		return yarn(c, base)
	}
	return nil, 0, fmt.Errorf("config: key \"rope_scaling.rope_type\": unsupported rope scaling %q", rs.Type)
}

func yarnMscale(scale, m float64) float64 {
	if scale <= 1 {
		return 1
	}
	return 0.1*m*math.Log(scale) + 1
}

// yarn is transformers' _compute_yarn_parameters.
func yarn(c Config, extra []float64) ([]float64, float64, error) {
	rs := c.RopeScaling
	hd, half := float64(c.HeadDim), c.HeadDim/2
	att := rs.AttnFactor
	if att == 0 {
		if rs.Mscale != 0 && rs.MscaleAllDim != 0 {
			att = yarnMscale(rs.Factor, rs.Mscale) / yarnMscale(rs.Factor, rs.MscaleAllDim)
		} else {
			att = yarnMscale(rs.Factor, 1)
		}
	}
	fast, slow := rs.BetaFast, rs.BetaSlow
	if fast == 0 {
		fast = 32
	}
	if slow == 0 {
		slow = 1
	}
	orig := float64(rs.OrigMaxPos)
	if orig == 0 {
		orig = float64(c.MaxPos)
	}
	corr := func(rot float64) float64 {
		return hd * math.Log(orig/(rot*2*math.Pi)) / (2 * math.Log(c.RopeTheta))
	}
	lo, hi := corr(fast), corr(slow)
	if rs.Truncate == nil || *rs.Truncate {
		lo, hi = math.Floor(lo), math.Ceil(hi)
	}
	lo, hi = math.Max(lo, 0), math.Min(hi, hd-1)
	if lo == hi {
		hi += 0.001
	}
	out := make([]float64, half)
	for i, fe := range extra {
		ramp := math.Min(math.Max((float64(i)-lo)/(hi-lo), 0), 1)
		ef := 1 - ramp // extrapolation weight
		out[i] = fe/rs.Factor*(1-ef) + fe*ef
	}
	return out, att, nil
}

// ropeTables returns cos and sin (T, hd/2) of pos·invFreq, times the
// attention factor.
func ropeTables(c Config, T int) (cos, sin []float32, err error) {
	inv, att, err := invFreq(c)
	if err != nil {
		return nil, nil, err
	}
	half := len(inv)
	cos, sin = make([]float32, T*half), make([]float32, T*half)
	for p := range T {
		for i, f := range inv {
			a := float64(p) * f
			cos[p*half+i] = float32(math.Cos(a) * att)
			sin[p*half+i] = float32(math.Sin(a) * att)
		}
	}
	return cos, sin, nil
}

// ropeForward rotates one head row in place, pairing i with i+hd/2
// (transformers' rotate_half).
func ropeForward(x, cos, sin []float32) {
	half := len(cos)
	a, b := x[:half], x[half:2*half]
	sin = sin[:half]
	for i, c := range cos {
		x0, x1, sn := a[i], b[i], sin[i]
		a[i] = float32(x0*c) - float32(x1*sn)
		b[i] = float32(x1*c) + float32(x0*sn)
	}
}

// ropeBackward applies the transposed rotation to a gradient row.
func ropeBackward(dx, cos, sin []float32) {
	half := len(cos)
	a, b := dx[:half], dx[half:2*half]
	sin = sin[:half]
	for i, c := range cos {
		d0, d1, sn := a[i], b[i], sin[i]
		a[i] = float32(d0*c) + float32(d1*sn)
		b[i] = float32(d1*c) - float32(d0*sn)
	}
}
