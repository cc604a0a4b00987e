package ckpt

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func fill(payload string) func(dir string) error {
	return func(dir string) error {
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("weights:"+payload), 0o644); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, "optim.bin"), []byte(strings.Repeat(payload, 1000)), 0o644)
	}
}

func write(t *testing.T, root string, step int64, metric float64) string {
	t.Helper()
	p, _, err := Write(root, Manifest{Step: step, Version: step, Metric: &metric}, fill(string(rune('a'+step))))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestWriteVerifyLatest(t *testing.T) {
	root := t.TempDir()
	write(t, root, 1, 0.1)
	p2 := write(t, root, 2, 0.2)
	e, m, rej, ok, err := Latest(root, -1)
	if err != nil || !ok || e.Path != p2 || m.Step != 2 || len(rej) != 0 {
		t.Fatalf("Latest = %v %v %v %v %v", e, m, rej, ok, err)
	}
	if _, _, _, ok, _ := Latest(root, 1); !ok {
		t.Fatal("Latest(maxStep=1) found nothing")
	}
}

func TestCorruptNewestFallsBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(dir string) error
		want   string
	}{
		{"bitflip", func(dir string) error {
			p := filepath.Join(dir, "optim.bin")
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[len(b)/2] ^= 0x01
			return os.WriteFile(p, b, 0o644)
		}, "optim.bin has SHA-256"},
		{"missing", func(dir string) error { return os.Remove(filepath.Join(dir, "model.safetensors")) }, "model.safetensors"},
		{"nomanifest", func(dir string) error { return os.Remove(filepath.Join(dir, ManifestName)) }, ManifestName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			p1 := write(t, root, 1, 0)
			p2 := write(t, root, 2, 0)
			if err := tc.break_(p2); err != nil {
				t.Fatal(err)
			}
			e, _, rej, ok, err := Latest(root, -1)
			if err != nil || !ok || e.Path != p1 {
				t.Fatalf("Latest = %v %v %v, want %s", e, ok, err, p1)
			}
			if len(rej) != 1 || rej[0].Entry.Path != p2 || !errors.Is(rej[0].Err, ErrCorrupt) || !strings.Contains(rej[0].Err.Error(), tc.want) {
				t.Fatalf("rejected = %+v, want %s naming %q", rej, p2, tc.want)
			}
		})
	}
}

func TestDiskFullKeepsPrevious(t *testing.T) {
	root := t.TempDir()
	p1 := write(t, root, 1, 0)
	// The trainer's writer hits a full disk halfway through its second file.
	_, _, err := Write(root, Manifest{Step: 2}, func(dir string) error {
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("w"), 0o644); err != nil {
			return err
		}
		return &os.PathError{Op: "write", Path: filepath.Join(dir, "optim.bin"), Err: syscall.ENOSPC}
	})
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "optim.bin") || !strings.Contains(err.Error(), "step 2") {
		t.Fatalf("err = %v, want ENOSPC naming step 2 and optim.bin", err)
	}
	all, _ := List(root)
	if len(all) != 1 || all[0].Path != p1 {
		t.Fatalf("List = %v, want only %s", all, p1)
	}
	if _, _, err := Verify(p1); err != nil {
		t.Fatalf("previous checkpoint: %v", err)
	}
	if des, _ := os.ReadDir(root); len(des) != 1 {
		t.Fatalf("temporary directory left behind: %v", des)
	}
}

func TestRetainUnion(t *testing.T) {
	root := t.TempDir()
	metrics := []float64{0.9, 0.1, 0.5, 0.2, 0.3, 0.05}
	for i, m := range metrics {
		write(t, root, int64(i+1), m)
	}
	if _, err := Retain(root, 2, 2, true); err != nil {
		t.Fatal(err)
	}
	all, _ := List(root)
	var got []int64
	for _, e := range all {
		got = append(got, e.Step)
	}
	// last 2: 5,6; top 2 by metric: 1 (0.9), 3 (0.5); newest: 6.
	if want := []int64{1, 3, 5, 6}; !bytes.Equal(int64s(got), int64s(want)) {
		t.Fatalf("kept %v, want %v", got, want)
	}
}

func int64s(v []int64) []byte {
	var b []byte
	for _, x := range v {
		b = append(b, byte(x))
	}
	return b
}
