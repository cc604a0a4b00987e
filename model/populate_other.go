//go:build !linux

package model

// populate is a no-op off Linux: pages fault in as they are written.
func populate([]byte) {}

// hugePages is a no-op off Linux.
func hugePages([]byte) {}
