//go:build !linux

package model

import (
	"errors"
	"os"
)

var errNoMmap = errors.New("model: no mmap on this platform")

// mapping is unused where files are not mapped.
type mapping struct{}

func (*mapping) add([]byte) {}

func mapFile(*os.File, int64) ([]byte, error) { return nil, errNoMmap }
