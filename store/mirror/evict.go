package mirror

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// evict removes sealed log chunks and packs from the cache, oldest first,
// while the cache holds more than Options.CacheBytes. A file leaves only
// when the manifest holds all of its bytes, nothing writes it, and it is
// not the newest chunk; readers holding it open see it fetched back.
func (m *Mirror) evict(local map[string]os.FileInfo) {
	if m.o.CacheBytes <= 0 {
		return
	}
	var total int64
	var newest string
	var cands []string
	for rel, fi := range local {
		total += fi.Size()
		dir, name := path.Split(rel)
		if dir != "runlog/" || !(strings.HasSuffix(name, ".seg") || strings.HasSuffix(name, ".pack")) {
			continue
		}
		cands = append(cands, rel)
		if stem := strings.TrimSuffix(strings.TrimSuffix(name, ".seg"), ".pack"); strings.HasSuffix(name, ".seg") && stem > newest {
			newest = stem
		}
	}
	if total <= m.o.CacheBytes {
		return
	}
	slices.Sort(cands) // names are zero-padded offsets: oldest first
	for _, rel := range cands {
		if total <= m.o.CacheBytes {
			return
		}
		stem := strings.TrimSuffix(strings.TrimSuffix(path.Base(rel), ".seg"), ".pack")
		if stem >= newest {
			continue
		}
		fi := local[rel]
		if m.evictOne(rel, fi) {
			total -= fi.Size()
			m.stats.Evicted.Add(1)
			m.stats.EvictedBytes.Add(fi.Size())
		}
	}
}

// evictOne removes rel from the cache if the bucket holds exactly it.
func (m *Mirror) evictOne(rel string, fi os.FileInfo) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.man.Files[rel]
	st, ok := m.st[rel]
	if t := m.track[rel]; e == nil || !ok || (t != nil && t.open > 0) || e.Size != fi.Size() || st.Key != e.lastKey() || !st.same(statOf(fi, st.Key)) {
		return false
	}
	for r := range m.readers[rel] {
		if f := r.f.Swap(nil); f != nil {
			f.Close()
		}
	}
	if err := os.Remove(filepath.Join(m.root, filepath.FromSlash(rel))); err != nil {
		m.log.Warn("mirror: evict", "file", rel, "err", err)
		return false
	}
	delete(m.st, rel)
	delete(m.track, rel)
	return true
}
