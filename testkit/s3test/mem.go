package s3test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/longhaul-rl/longhaul/store/bucket"
)

// Mem is an in-memory FAKE of bucket.Objects, for unit tests of the
// mirror's own logic only (cuts, parts, eviction, fencing by ETag). It is
// not S3: tests that prove what a real server does use Start (SeaweedFS).
type Mem struct {
	mu   sync.Mutex
	objs map[string][]byte
	tags map[string]string
	n    int
	// Puts counts Put and Upload calls.
	Puts int
	// BeforeUpload, when set, is called by Upload before it reads its
	// bytes (a test changes the file meanwhile).
	BeforeUpload func(key string)
}

// NewMem returns an empty fake bucket.
func NewMem() *Mem { return &Mem{objs: map[string][]byte{}, tags: map[string]string{}} }

var _ bucket.Objects = (*Mem)(nil)

// Get implements bucket.Objects.
func (m *Mem) Get(_ context.Context, key string) ([]byte, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objs[key]
	if !ok {
		return nil, "", fmt.Errorf("fake get %s: %w", key, bucket.ErrNotFound)
	}
	return bytes.Clone(b), m.tags[key], nil
}

// Put implements bucket.Objects with S3's condition semantics.
func (m *Mem) Put(_ context.Context, key string, data []byte, c bucket.Cond) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Puts++
	_, exists := m.objs[key]
	if c.IfNoneMatch == "*" && exists || c.IfMatch != "" && (!exists || m.tags[key] != c.IfMatch) {
		return "", fmt.Errorf("fake put %s: %w", key, bucket.ErrPrecondition)
	}
	return m.store(key, data), nil
}

func (m *Mem) store(key string, data []byte) string {
	m.n++
	s := sha256.Sum256(append(bytes.Clone(data), byte(m.n)))
	m.objs[key] = bytes.Clone(data)
	m.tags[key] = `"` + hex.EncodeToString(s[:8]) + `"`
	return m.tags[key]
}

// Upload implements bucket.Objects.
func (m *Mem) Upload(_ context.Context, key string, r io.Reader, size int64) error {
	if m.BeforeUpload != nil {
		m.BeforeUpload(key)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Puts++
	m.store(key, b)
	return nil
}

// Open implements bucket.Objects.
func (m *Mem) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	b, _, err := m.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// Delete implements bucket.Objects.
func (m *Mem) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objs, key)
	delete(m.tags, key)
	return nil
}

// List implements bucket.Objects.
func (m *Mem) List(_ context.Context, prefix string) ([]bucket.Object, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []bucket.Object
	for k, b := range m.objs {
		if strings.HasPrefix(k, prefix) {
			out = append(out, bucket.Object{Key: k, Size: int64(len(b))})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// AbortUploads implements bucket.Objects (the fake has no multipart).
func (m *Mem) AbortUploads(context.Context, string) (int, error) { return 0, nil }

// Keys lists the keys under prefix.
func (m *Mem) Keys(prefix string) []string {
	objs, _ := m.List(context.Background(), prefix)
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.Key
	}
	return out
}

// Set replaces an object's bytes behind the client's back (damage).
func (m *Mem) Set(key string, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.store(key, data)
}
