// Package rng derives every random stream of a run from the run seed, a
// purpose and ids, e.g. Stream(seed, "sample", group, member, attempt, call).
// There is no global source: the same names give the same stream in every
// process, which is what makes a resumed run equal an uninterrupted one.
package rng

import (
	"encoding/binary"
	"hash/fnv"
	"math/rand/v2"
)

// Derive returns a 64-bit seed for (seed, purpose, ids).
func Derive(seed uint64, purpose string, ids ...uint64) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	h.Write([]byte(purpose))
	h.Write([]byte{0})
	for _, id := range ids {
		binary.LittleEndian.PutUint64(b[:], id)
		h.Write(b[:])
	}
	return mix(h.Sum64())
}

// mix is the splitmix64 finaliser: it spreads FNV's weak low bits.
func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// NewPCG returns a PCG source seeded from s. Its state can be saved with
// MarshalBinary and restored with UnmarshalBinary for exact resume.
func NewPCG(s uint64) *rand.PCG { return rand.NewPCG(s, mix(s^0x5851f42d4c957f2d)) }

// Stream returns a generator for (seed, purpose, ids).
func Stream(seed uint64, purpose string, ids ...uint64) *rand.Rand {
	return rand.New(NewPCG(Derive(seed, purpose, ids...)))
}
