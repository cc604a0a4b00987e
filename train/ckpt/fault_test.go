package ckpt

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/longhaul-rl/longhaul/store"
)

// TestStorageFaultsKeepPrevious: the checkpoint's own writes go through the
// storage seam; a full disk or a failed fsync of a file, of the manifest,
// publishes nothing and leaves the previous checkpoint valid.
func TestStorageFaultsKeepPrevious(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault *store.Faulty
		want  error
	}{
		{"fsync of a trainer file fails", &store.Faulty{Fault: store.FailSync, At: 1, Match: "optim.bin"}, syscall.EIO},
		{"manifest write hits ENOSPC", &store.Faulty{Fault: store.NoSpace, At: 1, Match: ManifestName}, syscall.ENOSPC},
		{"manifest write torn", &store.Faulty{Fault: store.ShortWrite, At: 1, Match: ManifestName}, syscall.ENOSPC},
		{"manifest fsync fails", &store.Faulty{Fault: store.FailSync, At: 1, Match: ManifestName}, syscall.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			p1 := write(t, root, 1, 0)
			f := tc.fault
			f.FS = store.OS
			_, _, err := WriteFS(f, root, Manifest{Step: 2, Version: 2}, fill("b"))
			if !errors.Is(err, tc.want) || !f.Fired() {
				t.Fatalf("err = %v (fired %v), want %v", err, f.Fired(), tc.want)
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
		})
	}
}
