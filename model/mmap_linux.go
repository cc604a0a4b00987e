package model

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
)

// errNoMmap says the platform cannot map files (the caller reads them).
var errNoMmap = errors.New("model: no mmap on this platform")

// mapping is the mapped checkpoint files a model's tensors are views of.
// It is unmapped when no model refers to it any more.
type mapping struct {
	mu    sync.Mutex
	files [][]byte
}

// add keeps data mapped for as long as the mapping is reachable.
func (mp *mapping) add(data []byte) {
	mp.mu.Lock()
	defer mp.mu.Unlock()
	mp.files = append(mp.files, data)
	runtime.AddCleanup(mp, func(d []byte) { _ = syscall.Munmap(d) }, data)
}

// mapFile maps the whole file read-only, its pages populated up front
// (MAP_POPULATE: the page-table entries of a cached file are set in one
// pass, and an uncached one is read in, instead of a fault per 4 KiB page
// during the first decode steps).
func mapFile(f *os.File, size int64) ([]byte, error) {
	if size == 0 || int64(int(size)) != size {
		return nil, fmt.Errorf("mmap %s: size %d", f.Name(), size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", f.Name(), err)
	}
	return data, nil
}
