package mirror

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/longhaul-rl/longhaul/store/bucket"
)

// Bucket layout under PREFIX:
//
//	PREFIX/lease.json                 the writer's lease (store/lease)
//	PREFIX/manifest.json              what the bucket holds: every file, its size, its objects and their SHA-256
//	PREFIX/files/REL/EPOCH.SEQ        one object (a whole file, or a part of a growing one)
//
// Objects are never overwritten: a key names the lease epoch of its
// writer and a number that writer never uses twice, so a writer that lost
// its lease cannot change an object a later manifest names. Only the
// manifest changes, and only by If-Match on the ETag its writer last saw.
const (
	manifestKey = "manifest.json"
	leaseKey    = "lease.json"
	filesDir    = "files/"
	format      = 1
)

// Manifest is the bucket's table of contents: a consistent cut of the run
// directory.
type Manifest struct {
	Format int    `json:"format"`
	Epoch  uint64 `json:"epoch"`  // the writer's lease epoch
	Seq    uint64 `json:"seq"`    // one more with every manifest written
	Writer string `json:"writer"` // the writer's local cache id
	Holder string `json:"holder"` // host and pid, for people
	// Written is the writer's clock when it wrote this manifest; LogEnd is
	// the run log's durable end it covers (0 when the writer did not say).
	Written time.Time         `json:"written"`
	LogEnd  uint64            `json:"log_end"`
	Files   map[string]*Entry `json:"files"`
}

// Entry is one file: its parts, concatenated, are its bytes.
type Entry struct {
	Size  int64  `json:"size"`
	Parts []Part `json:"parts"`
}

// Part is one object of a file.
type Part struct {
	Key    string `json:"key"` // relative to the prefix
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

func (e *Entry) lastKey() string {
	if e == nil || len(e.Parts) == 0 {
		return ""
	}
	return e.Parts[len(e.Parts)-1].Key
}

func objectKey(rel string, epoch, seq uint64) string {
	return filesDir + path.Clean(rel) + "/" + strconv.FormatUint(epoch, 10) + "." + strconv.FormatUint(seq, 10)
}

// keyEpoch returns the epoch in an object key (0 if it names none).
func keyEpoch(key string) uint64 {
	base := path.Base(key)
	e, _, ok := strings.Cut(base, ".")
	if !ok {
		return 0
	}
	n, _ := strconv.ParseUint(e, 10, 64)
	return n
}

func decodeManifest(b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("mirror: manifest: %w", err)
	}
	if m.Format != format {
		return nil, fmt.Errorf("mirror: manifest format %d (this build reads %d)", m.Format, format)
	}
	if m.Files == nil {
		m.Files = map[string]*Entry{}
	}
	for rel, e := range m.Files {
		var n int64
		for _, p := range e.Parts {
			n += p.Size
		}
		if n != e.Size || rel == "" || strings.HasPrefix(rel, "/") || strings.Contains(rel, "..") {
			return nil, fmt.Errorf("mirror: manifest: entry %q is inconsistent", rel)
		}
	}
	return &m, nil
}

// readManifest returns the bucket's manifest and its ETag (nil, "" when
// the run has none yet).
func readManifest(ctx context.Context, objs bucket.Objects, key string) (*Manifest, string, error) {
	b, etag, err := objs.Get(ctx, key)
	if errors.Is(err, bucket.ErrNotFound) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	m, err := decodeManifest(b)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %s: %w", errBadManifest, key, err)
	}
	return m, etag, nil
}

// errBadManifest: the manifest does not decode (not waited out).
var errBadManifest = errors.New("mirror: bad manifest")

// ErrFenced is in the chain of every write of a mirror whose manifest
// another controller changed: it lost the run.
var ErrFenced = errors.New("mirror: another controller took this run over; this one no longer writes it")

// writeManifest puts m under If-Match etag (If-None-Match: * when etag is
// empty). A refused condition is either another writer (ErrFenced) or our
// own write whose answer was lost (the bucket then holds exactly m).
func writeManifest(ctx context.Context, objs bucket.Objects, key string, m *Manifest, etag string) (string, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("mirror: %w", err)
	}
	cond := bucket.Cond{IfMatch: etag}
	if etag == "" {
		cond = bucket.Cond{IfNoneMatch: "*"}
	}
	newTag, err := objs.Put(ctx, key, b, cond)
	if errors.Is(err, bucket.ErrPrecondition) {
		now, nowTag, rerr := readManifest(ctx, objs, key)
		if rerr != nil {
			return "", fmt.Errorf("mirror: manifest write refused and unreadable: %w", errors.Join(err, rerr))
		}
		if now != nil && now.Epoch == m.Epoch && now.Seq == m.Seq && now.Writer == m.Writer {
			return nowTag, nil
		}
		holder := "a controller"
		if now != nil {
			holder = fmt.Sprintf("%s (epoch %d)", now.Holder, now.Epoch)
		}
		return "", fmt.Errorf("%w: the manifest is now %s's", ErrFenced, holder)
	}
	return newTag, err
}
