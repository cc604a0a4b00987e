// Package s3test gives tests an S3 server: Start runs a real one,
// SeaweedFS (`weed server -s3`, Apache-2.0), on loopback ports in a
// temporary directory, with credentials it enforces; Mem is an in-memory
// fake for unit tests of the mirror's own logic only. A test says which
// it runs.
//
// The weed binary is found through LONGHAUL_WEED, else the per-machine
// cache the CI setup step builds it into (~/.cache/longhaul/weed-VERSION,
// see .ci/weed.sh), else ~/.cache/longhaul/weed. Without it a
// test is skipped with a message saying how to get it, unless
// LONGHAUL_REQUIRE_S3 is set (CI sets it): then it fails.
package s3test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/store/bucket"
	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

// WeedVersion is the SeaweedFS module version the tests are run against.
const WeedVersion = "v0.0.0-20261109003541-7506e5f91cd6"

// Environment variables.
const (
	EnvWeed    = "LONGHAUL_WEED"
	EnvRequire = "LONGHAUL_REQUIRE_S3"
)

// The credentials the test server enforces.
const (
	AccessKey = "longhaul-test"
	SecretKey = "longhaul-test-secret"
)

// WeedPath returns the weed binary, or an error saying where it looked.
func WeedPath() (string, error) {
	if p := os.Getenv(EnvWeed); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvWeed, p, err)
		}
		return p, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	cands := []string{filepath.Join(cache, "longhaul", "weed-"+WeedVersion, "weed"), filepath.Join(cache, "longhaul", "weed")}
	for _, p := range cands {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("no SeaweedFS binary: set %s, or build it with .ci/weed.sh (into %s)", EnvWeed, cands[0])
}

// Need returns the weed binary; without one it skips the test, or fails
// it when LONGHAUL_REQUIRE_S3 is set.
func Need(t testing.TB) string {
	t.Helper()
	p, err := WeedPath()
	if err != nil {
		if os.Getenv(EnvRequire) != "" {
			t.Fatalf("%v (%s is set: the S3 tests must run)", err, EnvRequire)
		}
		t.Skipf("skipped: this test needs a real S3 server: %v", err)
	}
	return p
}

// Server is a running SeaweedFS with its S3 gateway.
type Server struct {
	bin, dir string
	args     []string
	cmd      *exec.Cmd
	exited   chan struct{}
	out      *proctest.Buffer
	// Endpoint is the S3 gateway's URL (http://127.0.0.1:PORT).
	Endpoint string
}

// Start starts a server of the test's own on free loopback ports in a
// temporary directory; the test's cleanup kills it. Tests that only need
// a bucket use Shared.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := start(Need(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

var shared struct {
	sync.Mutex
	s   *Server
	dir string
	n   int
}

// Shared returns the test binary's one server (started on first use),
// with a new bucket for the test; Main stops it. Starting SeaweedFS takes
// seconds, so tests that do not stop the server share one.
func Shared(t testing.TB) (*Server, *bucket.Client) {
	t.Helper()
	bin := Need(t)
	shared.Lock()
	defer shared.Unlock()
	if shared.s == nil {
		dir, err := os.MkdirTemp("", "longhaul-weed-")
		if err != nil {
			t.Fatal(err)
		}
		s, err := start(bin, dir)
		if err != nil {
			os.RemoveAll(dir)
			t.Fatal(err)
		}
		shared.s, shared.dir = s, dir
	}
	shared.n++
	return shared.s, shared.s.MakeBucket(t, fmt.Sprintf("t%d-%d", os.Getpid()%100000, shared.n))
}

// Main runs a test binary's tests and then stops the shared server:
// func TestMain(m *testing.M) { os.Exit(s3test.Main(m)) }.
func Main(m *testing.M) int {
	code := m.Run()
	shared.Lock()
	defer shared.Unlock()
	if shared.s != nil {
		shared.s.Stop()
		os.RemoveAll(shared.dir)
	}
	return code
}

// start starts a server, trying again on new ports when weed exits before
// it is ready: a port picked free may be taken by another process before
// weed binds it (this machine runs many tests at once).
func start(bin, dir string) (*Server, error) {
	var errs []error
	for try := 0; try < 3; try++ {
		s, err := startOnce(bin, dir)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
		if !errors.Is(err, errExited) {
			break
		}
	}
	return nil, errors.Join(errs...)
}

var errExited = errors.New("weed exited before it was ready")

func startOnce(bin, dir string) (*Server, error) {
	conf := filepath.Join(dir, "s3.json")
	ident := fmt.Sprintf(`{"identities":[{"name":"longhaul","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","Write","List","Tagging"]}]}`, AccessKey, SecretKey)
	if err := os.WriteFile(conf, []byte(ident), 0o644); err != nil {
		return nil, err
	}
	data, err := os.MkdirTemp(dir, "data-") // a fresh one per try
	if err != nil {
		return nil, err
	}
	var perr error
	port := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			perr = err
			return "0"
		}
		defer ln.Close()
		return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	}
	s3port := port()
	s := &Server{bin: bin, dir: dir, out: &proctest.Buffer{}, Endpoint: "http://127.0.0.1:" + s3port}
	s.args = []string{"server", "-dir=" + data, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port=" + port(), "-master.port.grpc=" + port(), "-master.volumeSizeLimitMB=64",
		"-volume.port=" + port(), "-volume.port.grpc=" + port(), "-volume.max=0",
		"-filer.port=" + port(), "-filer.port.grpc=" + port(), "-filer.localSocket=" + filepath.Join(dir, "filer.sock"),
		"-s3", "-s3.port=" + s3port, "-s3.port.grpc=" + port(), "-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.config=" + conf}
	if perr != nil {
		return nil, perr
	}
	return s, s.run()
}

// run starts the process and waits until a bucket can be made and
// listed (the gateway answers before its filer has registered).
func (s *Server) run() error {
	s.cmd = exec.Command(s.bin, s.args...)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	// Its own process group (Stop kills weed's children too), and killed
	// with the test binary should that die first (a go test timeout).
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start weed: %w", err)
	}
	s.exited = make(chan struct{})
	go func() { s.cmd.Wait(); close(s.exited) }()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c, err := s.client("longhaul-test", s.Endpoint)
	if err != nil {
		s.Stop()
		return err
	}
	for {
		err := c.EnsureBucket(ctx)
		if err == nil {
			_, err = c.List(ctx, "")
		}
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("%w\n%s", errExited, proctest.Tail(s.out.String(), 3000))
		case <-ctx.Done():
			s.Stop()
			return fmt.Errorf("weed not ready: %w (last: %v)\n%s", ctx.Err(), err, proctest.Tail(s.out.String(), 3000))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop SIGKILLs the server (an outage: the bucket stops answering) and
// waits for it to exit.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
}

// Restart starts the server again on the same directory and ports.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.run(); err != nil {
		t.Fatal(err)
	}
}

// Log is the server's output so far.
func (s *Server) Log() string { return s.out.String() }

// Env is the environment a child process reaches the server with, as the
// AWS tools take it.
func (s *Server) Env() []string {
	return []string{"AWS_ENDPOINT_URL=" + s.Endpoint, "AWS_ACCESS_KEY_ID=" + AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + SecretKey, "AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null"}
}

// Client returns a client of bucketName at endpoint (default: the
// server's; a fault proxy's URL puts the proxy in between). An empty
// bucketName is "longhaul-test".
func (s *Server) Client(t testing.TB, bucketName string, endpoint ...string) *bucket.Client {
	t.Helper()
	if bucketName == "" {
		bucketName = "longhaul-test"
	}
	ep := s.Endpoint
	if len(endpoint) > 0 {
		ep = endpoint[0]
	}
	c, err := s.client(bucketName, ep)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (s *Server) client(bucketName, ep string) (*bucket.Client, error) {
	return bucket.New(context.Background(), bucketName, bucket.Options{Endpoint: ep, AccessKey: AccessKey, SecretKey: SecretKey,
		PartSize: 5 << 20, HeaderTimeout: 30 * time.Second})
}

// MakeBucket creates a bucket on the server and returns its client.
func (s *Server) MakeBucket(t testing.TB, name string) *bucket.Client {
	t.Helper()
	c := s.Client(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.EnsureBucket(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	return c
}
