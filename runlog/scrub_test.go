package runlog

import (
	"context"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/store"
)

// sealedLog builds a log of several small chunks with a snapshot at its
// end and opens it once more, so the watermark reaches the end and every
// chunk but the fresh one is sealed; it returns the records' offsets and
// events.
func sealedLog(t *testing.T, dir string) ([]Offset, []Event) {
	t.Helper()
	ctx := context.Background()
	l := openLog(t, dir, Options{ChunkSize: 4 << 10})
	evs := genRun(NewState(), randChooser{rand.New(rand.NewPCG(7, 8))}, 400, t.Fatalf)
	var offs []Offset
	for _, ev := range evs {
		offs = append(offs, mustAppend(t, l, ev))
	}
	if _, err := l.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, Options{})
	if found, err := l.Scrubbed(ctx); err != nil || len(found) != 0 {
		t.Fatalf("scrub of an intact log: %v, %v", found, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return offs, evs
}

// sealOf digests a chunk's bytes and its pack's, as a seal records them.
func sealOf(base uint64, chunk, pack []byte) seal {
	return seal{base: base, chunkSize: uint64(len(chunk)), packSize: uint64(len(pack)),
		chunkSum: sha256.Sum256(chunk), packSum: sha256.Sum256(pack)}
}

// flip flips one byte of a file.
func flip(t *testing.T, path string, at int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || at >= len(b) {
		t.Fatalf("%s: %v (%d bytes, flip at %d)", path, err, len(b), at)
	}
	b[at] ^= 0x10
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// recordIn returns the index of the first record of chunks[0] (the
// oldest, wholly below the watermark and the snapshot) whose rollout's
// group has the status want in s.
func recordIn(t *testing.T, chunks []uint64, offs []Offset, evs []Event, s *State, want GroupStatus) int {
	t.Helper()
	for i, ev := range evs {
		if id, ok := eventRollout(ev); ok && uint64(offs[i]) < chunks[1] && s.Groups[id.Group].Status == want {
			return i
		}
	}
	t.Fatalf("no record of a %v group in the first chunk", want)
	return 0
}

// TestSealedChunksAreChecked: a byte flipped in a record that the snapshot
// covers and an earlier resume already verified (below the watermark) was
// passed over by every later resume, and inspect then refused the run.
// Now the scrub pass after Open finds it against the chunk's seal, names
// file and offset, says the run does not need it, logs it once (a
// LogDamaged event, not repeated by the next resume), and inspect shows it
// instead of refusing the run.
func TestSealedChunksAreChecked(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	offs, evs := sealedLog(t, dir)
	logDir := filepath.Join(dir, logSubdir)
	chunks, _ := listChunks(store.OS, logDir)
	if len(chunks) < 4 {
		t.Fatalf("%d chunks, want several", len(chunks))
	}
	for _, base := range chunks[:len(chunks)-1] {
		s, ok, err := readSeal(logDir, base)
		chunk, _ := os.ReadFile(filepath.Join(logDir, chunkName(base)))
		pack, _ := os.ReadFile(filepath.Join(logDir, packName(base)))
		if !ok || err != nil || s != sealOf(base, chunk, pack) {
			t.Fatalf("chunk %d: seal %v (%v), want the digest of its files", base, ok, err)
		}
	}
	final := foldAt(t, offs, evs)
	i := recordIn(t, chunks, offs, evs, final, GroupStatusTrained)
	path := filepath.Join(logDir, chunkName(chunks[0]))
	flip(t, path, int(uint64(offs[i])-chunks[0])+frameHeaderSize+1)

	l := openLog(t, dir, Options{}) // replay starts at the snapshot: Open reads nothing damaged
	found, err := l.Scrubbed(ctx)
	if err != nil || len(found) != 1 {
		t.Fatalf("scrub: %v, %v; want one finding", found, err)
	}
	d := found[0]
	if d.File != filepath.Join(logSubdir, chunkName(chunks[0])) || d.Offset != uint64(offs[i]) || !strings.Contains(d.Reason, "not needed to go on") {
		t.Fatalf("finding %+v, want %s at offset %d, not needed", d, path, offs[i])
	}
	t.Log(d.Reason)
	l.View(func(s *State) {
		if len(s.Damage) != 1 || s.Damage[0] != d || s.Counts[KindLogDamaged] != 1 {
			t.Errorf("state holds %v (%d LogDamaged), want the finding once", s.Damage, s.Counts[KindLogDamaged])
		}
	})
	mustAppend(t, l, CheckpointDurable{Step: final.Step, Version: final.Version, Path: "x"}) // the run goes on
	l.Close()

	l = openLog(t, dir, Options{})
	if again, err := l.Scrubbed(ctx); err != nil || len(again) != 1 {
		t.Fatalf("second scrub: %v, %v", again, err)
	}
	l.View(func(s *State) {
		if s.Counts[KindLogDamaged] != 1 {
			t.Errorf("%d LogDamaged events after a second resume, want 1", s.Counts[KindLogDamaged])
		}
	})
	l.Close()

	rep, err := Inspect(ctx, dir)
	if err != nil {
		t.Fatalf("inspect refuses a run whose damage is logged and passed over: %v", err)
	}
	if len(rep.Damage) != 1 || !rep.Damage[0].Logged || rep.Damage[0].Offset != uint64(offs[i]) || rep.FromSnapshot == 0 {
		t.Fatalf("inspect: damage %+v, from snapshot %d", rep.Damage, rep.FromSnapshot)
	}
	var text strings.Builder
	rep.WriteText(&text)
	if !strings.Contains(text.String(), "DAMAGE") || !strings.Contains(text.String(), chunkName(chunks[0])) {
		t.Fatalf("inspect text does not show the damage:\n%s", text.String())
	}
}

// TestScrubSaysWhatIsNeeded: damage in a record of a group still open is
// reported as needed (a resumed rollout reads it); damage in a pack names
// the rollouts whose tokens it holds, and reading one of them fails naming
// the pack; a chunk without a seal (an older run) is verified record by
// record and sealed.
func TestScrubSaysWhatIsNeeded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	offs, evs := sealedLog(t, dir)
	logDir := filepath.Join(dir, logSubdir)
	chunks, _ := listChunks(store.OS, logDir)
	final := foldAt(t, offs, evs)

	open := -1
	for i, ev := range evs {
		id, ok := eventRollout(ev)
		if ok && uint64(offs[i]) < chunks[len(chunks)-2] && final.Groups[id.Group].Status == GroupStatusOpen {
			open = i
			break
		}
	}
	if open < 0 {
		t.Fatal("no record of an open group in a sealed chunk")
	}
	k := 0
	for k+1 < len(chunks) && chunks[k+1] <= uint64(offs[open]) {
		k++
	}
	flip(t, filepath.Join(logDir, chunkName(chunks[k])), int(uint64(offs[open])-chunks[k])+frameHeaderSize+1)
	os.Remove(filepath.Join(logDir, sealName(chunks[k]))) // as an older run left it
	flip(t, filepath.Join(logDir, packName(chunks[0])), blobHeaderSize+1)
	j := 1 // an unsealed chunk whose pack is damaged: found through its records' blob references
	if j == k {
		j = 2
	}
	os.Remove(filepath.Join(logDir, sealName(chunks[j])))
	flip(t, filepath.Join(logDir, packName(chunks[j])), blobHeaderSize+2)

	l := openLog(t, dir, Options{})
	found, err := l.Scrubbed(ctx)
	l.Close()
	if err != nil || len(found) != 3 {
		t.Fatalf("scrub: %v, %v; want three findings", found, err)
	}
	if j > k {
		found[0], found[1] = found[1], found[0]
	}
	rec, unsealedPack, pack := found[0], found[1], found[2] // newest chunk first
	if unsealedPack.File != filepath.Join(logSubdir, packName(chunks[j])) || unsealedPack.Offset != 0 {
		t.Errorf("unsealed pack finding %+v, want byte 0 of pack %d", unsealedPack, chunks[j])
	}
	if rec.File != filepath.Join(logSubdir, chunkName(chunks[k])) || rec.Offset != uint64(offs[open]) || !strings.Contains(rec.Reason, "needed by rollout") {
		t.Errorf("record finding %+v, want offset %d, needed", rec, offs[open])
	}
	if pack.File != filepath.Join(logSubdir, packName(chunks[0])) || pack.Offset != 0 || !strings.Contains(pack.Reason, "rollout g") {
		t.Fatalf("pack finding %+v, want byte 0 of the first pack and its rollouts", pack)
	}
	t.Log(rec.Reason)
	t.Log(pack.Reason)
	if _, ok, _ := readSeal(logDir, chunks[k]); ok {
		t.Error("a damaged unsealed chunk was sealed")
	}
	id, err := ParseRolloutID(strings.TrimRight(strings.Fields(strings.SplitN(pack.Reason, "rollout ", 2)[1])[0], ",:"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = InspectRollout(ctx, dir, id)
	var ce *CorruptionError
	if !errors.As(err, &ce) || filepath.Base(ce.Path) != packName(chunks[0]) {
		t.Fatalf("inspect of rollout %s whose tokens are damaged: %v", id, err)
	}
}

// TestWriterSealsRolledChunks: a chunk the writer rolls past is sealed at
// once, with the digest of what it wrote (no read, no reopen).
func TestWriterSealsRolledChunks(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{ChunkSize: 2 << 10})
	defer l.Close()
	for _, ev := range genRun(NewState(), randChooser{rand.New(rand.NewPCG(1, 2))}, 150, t.Fatalf) {
		mustAppend(t, l, ev)
	}
	logDir := filepath.Join(dir, logSubdir)
	chunks, _ := listChunks(store.OS, logDir)
	if len(chunks) < 3 {
		t.Fatalf("%d chunks", len(chunks))
	}
	for _, base := range chunks[:len(chunks)-1] {
		s, ok, err := readSeal(logDir, base)
		chunk, _ := os.ReadFile(filepath.Join(logDir, chunkName(base)))
		pack, _ := os.ReadFile(filepath.Join(logDir, packName(base)))
		if !ok || err != nil || s != sealOf(base, chunk, pack) {
			t.Fatalf("rolled chunk %d: seal %v %v %+v, want the digest of its files", base, ok, err, s)
		}
	}
	if _, ok, _ := readSeal(logDir, chunks[len(chunks)-1]); ok {
		t.Fatal("the chunk being written is sealed")
	}
}

// TestSealedTailIsDamage: a sealed chunk was whole before its seal was
// written, so a cut at its end, when it is the log's last chunk (a kill
// between a roll's seal and the next chunk's creation), is damage, not a
// torn tail to cut back.
func TestSealedTailIsDamage(t *testing.T) {
	dir := t.TempDir()
	sealedLog(t, dir)
	logDir := filepath.Join(dir, logSubdir)
	chunks, _ := listChunks(store.OS, logDir)
	last, prev := chunks[len(chunks)-1], chunks[len(chunks)-2]
	if fi, _ := os.Stat(filepath.Join(logDir, chunkName(last))); fi.Size() != chunkHeaderSize {
		t.Fatalf("fresh chunk holds %d bytes", fi.Size())
	}
	os.Remove(filepath.Join(logDir, chunkName(last)))
	os.Remove(filepath.Join(logDir, packName(last)))
	os.Remove(filepath.Join(logDir, watermarkFile)) // written at the Open before the roll, below the chunk's end
	path := filepath.Join(logDir, chunkName(prev))
	fi, _ := os.Stat(path)
	if err := os.Truncate(path, fi.Size()-3); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), dir, Options{})
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.Path != path || !strings.Contains(err.Error(), "sealed") {
		t.Fatalf("Open of a sealed chunk cut short: %v", err)
	}
}
