package mirror_test

// These tests run the mirror against a real S3 server, SeaweedFS on
// loopback (testkit/s3test); without the weed binary they are skipped, or
// fail when LONGHAUL_REQUIRE_S3 is set (CI).

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/store"
	"github.com/longhaul-rl/longhaul/store/bucket"
	"github.com/longhaul-rl/longhaul/store/mirror"
	"github.com/longhaul-rl/longhaul/testkit/faultproxy"
	"github.com/longhaul-rl/longhaul/testkit/s3test"
)

const childEnv = "LONGHAUL_MIRROR_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	os.Exit(s3test.Main(m))
}

func openReal(t *testing.T, c bucket.Objects, dir string) *mirror.Mirror {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := mirror.Open(ctx, c, mirror.Options{URL: "s3://test/run", Prefix: "run", Dir: dir, SyncInterval: time.Hour, LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// On the real server: a round trip to an empty machine, and a controller
// whose run was taken over finds its manifest write refused by the
// server's If-Match (the fence), so the new holder's view is untouched.
func TestMirrorFencedByTheServer(t *testing.T) {
	_, c := s3test.Shared(t)
	dirA := t.TempDir()
	a := openReal(t, c, dirA)
	a.Start(func() mirror.Cut { return wholeCut{} })
	write(t, a, filepath.Join(dirA, "runlog", "f"), []byte("shipped by A"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC)
	flush(t, a)
	a.StopRenewing()
	dirB := t.TempDir()
	b := openReal(t, c, dirB)
	defer b.Close(context.Background())
	write(t, a, filepath.Join(dirA, "runlog", "f"), []byte("A after the takeover"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Flush(ctx); !errors.Is(err, mirror.ErrFenced) {
		t.Fatalf("A's flush after the takeover: %v, want ErrFenced", err)
	}
	a.Close(context.Background())
	got, err := store.ReadFile(b, filepath.Join(dirB, "runlog", "f"))
	if err != nil || string(got) != "shipped by A" {
		t.Fatalf("B reads %q (%v)", got, err)
	}
}

// A multipart upload cut by a SIGKILL of its process leaves nothing a
// resume reads: the next controller reads the file's previous version,
// and aborts the unfinished upload.
func TestKilledMultipartUploadLeavesNothing(t *testing.T) {
	srv, c := s3test.Shared(t)
	dirA := t.TempDir()
	a := openReal(t, c, dirA)
	a.Start(func() mirror.Cut { return wholeCut{} })
	write(t, a, filepath.Join(dirA, "big"), []byte("version 1"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC)
	flush(t, a)
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	var pid atomic.Int64
	killed := make(chan struct{})
	p := faultproxy.NewWithOptions(srv.Endpoint, faultproxy.When(func(r *faultproxy.Request) bool {
		return r.Method == http.MethodPut && strings.Contains(r.Query, "partNumber=2")
	}, faultproxy.PlanFunc(func(*faultproxy.Request) faultproxy.Fault {
		// The second part is on its way: the machine dies now.
		if n := pid.Load(); n > 0 && syscall.Kill(int(n), syscall.SIGKILL) == nil {
			close(killed)
		}
		return faultproxy.Timeout
	})), faultproxy.Options{PreserveHost: true, MaxHold: 5 * time.Second})
	defer p.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", "CHILD_ENDPOINT="+p.URL(), "CHILD_BUCKET="+c.Bucket(), "CHILD_DIR="+dirA)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid.Store(int64(cmd.Process.Pid))
	err := cmd.Wait()
	select {
	case <-killed:
	default:
		t.Fatalf("the child was not killed mid-upload: %v\n%s", err, out.String())
	}

	b := openReal(t, c, t.TempDir())
	defer b.Close(context.Background())
	if n := b.Resume().AbortedUploads; n < 1 {
		t.Fatalf("aborted %d unfinished uploads, want the killed one", n)
	}
	got, err := store.ReadFile(b, filepath.Join(b.Root(), "big"))
	if err != nil || string(got) != "version 1" {
		t.Fatalf("after the cut upload the run reads %d bytes %.20q (%v), want version 1", len(got), got, err)
	}
}

// child writes a 12 MiB file into the cache its parent shipped version 1
// of, and ships it (multipart, 5 MiB parts) until the parent kills it.
func child() int {
	ctx := context.Background()
	c, err := bucket.New(ctx, os.Getenv("CHILD_BUCKET"), bucket.Options{Endpoint: os.Getenv("CHILD_ENDPOINT"),
		AccessKey: s3test.AccessKey, SecretKey: s3test.SecretKey, PartSize: 5 << 20})
	if err != nil {
		return 2
	}
	dir := os.Getenv("CHILD_DIR")
	m, err := mirror.Open(ctx, c, mirror.Options{URL: "s3://test/run", Prefix: "run", Dir: dir, SyncInterval: time.Hour, LeaseTTL: time.Second})
	if err != nil {
		os.Stderr.WriteString(err.Error())
		return 2
	}
	m.Start(func() mirror.Cut { return wholeCut{} })
	big := make([]byte, 12<<20)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range big {
		big[i] = byte(r.Uint32())
	}
	f, err := m.OpenFile(filepath.Join(dir, "big"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err == nil {
		_, err = f.Write(big)
		f.Close()
	}
	if err == nil {
		err = m.Flush(ctx)
	}
	os.Stderr.WriteString("child: flush returned: " + errString(err))
	return 3
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
