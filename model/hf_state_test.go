package model

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
)

// TestFamiliesResumeExact: weights (SaveDir) + trainer state at step 2, loaded and
// continued to 4, equal training straight to 4 bit for bit; corrupt or
// truncated state is refused.
func TestFamiliesResumeExact(t *testing.T) {
	ctx := context.Background()
	cfg := tinyConfigs()["qwen3"]
	oc := DefaultOptimConfig()
	batch := func(m *Model, s int) []Sequence { return testSeqs(t, m, []int{12, 30}, uint64(s)) }
	lc := LossConfig{Kind: LossPG}
	straight := testModel(t, cfg, 4, 2)
	tr, _ := NewTrainer(straight, oc)
	for s := range 4 {
		if _, err := tr.Step(ctx, batch(straight, s), lc); err != nil {
			t.Fatal(err)
		}
	}
	m := testModel(t, cfg, 4, 2)
	tr2, _ := NewTrainer(m, oc)
	for s := range 2 {
		if _, err := tr2.Step(ctx, batch(m, s), lc); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "ck")
	if err := m.SaveDir(dir, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	var st bytes.Buffer
	if err := tr2.SaveState(&st); err != nil {
		t.Fatal(err)
	}
	m3, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	tr3, _ := NewTrainer(m3, oc)
	if err := tr3.LoadState(bytes.NewReader(st.Bytes())); err != nil {
		t.Fatal(err)
	}
	for s := 2; s < 4; s++ {
		if _, err := tr3.Step(ctx, batch(m3, s), lc); err != nil {
			t.Fatal(err)
		}
	}
	if m3.Digest() != straight.Digest() || tr3.StepCount() != 4 {
		t.Fatal("resumed training differs from training straight through")
	}
	b := st.Bytes()
	bad := append([]byte(nil), b...)
	bad[100] ^= 1
	for name, data := range map[string][]byte{"corrupt": bad, "truncated": b[:len(b)-9], "magic": append([]byte("XXXXXXXX"), b[8:]...)} {
		if err := tr3.LoadState(bytes.NewReader(data)); err == nil {
			t.Errorf("%s state accepted", name)
		}
	}
}
