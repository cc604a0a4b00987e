package crashtest

// Whole machines lost, with the run kept in a real S3 server (SeaweedFS on
// loopback, testkit/s3test): the controller process SIGKILLed and its
// local directory deleted, the next start on a fresh directory, as a new
// node would. These tests run whole processes for tens of seconds, so they
// run only with LONGHAUL_S3_E2E=1 (.ci/steps/41-s3-machine-loss.sh) and a
// weed binary.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/store/bucket"
	"github.com/longhaul-rl/longhaul/store/mirror"
	"github.com/longhaul-rl/longhaul/testkit/s3test"
)

func TestMain(m *testing.M) { os.Exit(s3test.Main(m)) }

// EnvS3E2E enables the machine-loss tests.
const EnvS3E2E = "LONGHAUL_S3_E2E"

func needS3E2E(t *testing.T) (string, *s3test.Server, *bucket.Client) {
	t.Helper()
	if os.Getenv(EnvS3E2E) == "" {
		t.Skipf("skipped: whole-machine loss tests run with %s=1 (.ci/steps/41-s3-machine-loss.sh)", EnvS3E2E)
	}
	bin := binary(t)
	srv, c := s3test.Shared(t)
	return bin, srv, c
}

// node is one controller process on a "machine" whose local directory is
// cache.
type node struct {
	cmd   *exec.Cmd
	out   bytes.Buffer
	cache string
	done  chan struct{}
	err   error
}

func startNode(t *testing.T, bin string, env []string, url, cache, crashAt string, args ...string) *node {
	t.Helper()
	n := &node{cache: cache, done: make(chan struct{})}
	argv := append([]string{"train", "--config", tinyConfig(t), "--run-dir", url, "--no-progress", "--log-level", "warn",
		"store.cache_dir=" + cache}, args...)
	n.cmd = exec.Command(bin, argv...)
	n.cmd.Env = append(append(os.Environ(), env...), EnvCrashAt+"="+crashAt)
	n.cmd.Stdout, n.cmd.Stderr = &n.out, &n.out
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { n.err = n.cmd.Wait(); close(n.done) }()
	t.Cleanup(func() {
		n.cmd.Process.Signal(syscall.SIGKILL)
		<-n.done
	})
	return n
}

func (n *node) killedBySignal() bool {
	var ee *exec.ExitError
	if errors.As(n.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return true
		}
	}
	return false
}

// storm loses the machine kills times, then runs the run to its end on a
// fresh one, and pulls the bucket's copy of it into a local directory.
// perStep is how long a step of the uninterrupted run took.
func storm(t *testing.T, bin string, srv *s3test.Server, c *bucket.Client, prefix string, kills int, seed uint64, perStep time.Duration, args []string) string {
	t.Helper()
	url := "s3://" + c.Bucket() + "/" + prefix
	r := rand.New(rand.NewPCG(seed, 0x6d61))
	lost, prev := 0, 0 // prev: the most steps a lost machine's cache held
	for i := 0; lost < kills; i++ {
		if i > 3*kills {
			t.Fatalf("only %d of %d machine losses landed", lost, kills)
		}
		cache := filepath.Join(t.TempDir(), "node")
		crashAt, how := "", ""
		var n *node
		if i%3 == 2 {
			crashAt = fmt.Sprintf("%s:%d", Points[(i/3)%len(Points)], 1+r.IntN(2))
			how = "crash point " + crashAt
			n = startNode(t, bin, srv.Env(), url, cache, crashAt, args...)
		} else {
			// Lost at a random moment of the first two steps it trains beyond
			// every earlier machine's progress: each machine moves the
			// run on by a step or two, so the storm ends before the run
			// does however fast the machine, and the lease wait
			// (store.lease_s=1) does not count.
			d := time.Duration(2 * float64(perStep) * r.Float64())
			how = fmt.Sprintf("%s after step %d", d.Round(time.Millisecond), prev+1)
			n = startNode(t, bin, srv.Env(), url, cache, "", args...)
			go func(after int) {
				for lines(cache) < after {
					select {
					case <-n.done:
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
				select {
				case <-time.After(d):
					n.cmd.Process.Signal(syscall.SIGKILL)
				case <-n.done:
				}
			}(prev + 1)
		}
		<-n.done
		switch {
		case n.killedBySignal():
			lost++
			t.Logf("machine %d lost (%s)", lost, how)
		case n.err != nil:
			t.Fatalf("start %d (%s): %v\n%s", i+1, how, n.err, n.out.String())
		default:
			t.Fatalf("the run finished after %d of %d machine losses: make it longer", lost, kills)
		}
		prev = max(prev, lines(cache))
		if err := os.RemoveAll(cache); err != nil { // the disk goes with the machine
			t.Fatal(err)
		}
	}
	n := startNode(t, bin, srv.Env(), url, filepath.Join(t.TempDir(), "last"), "", args...)
	<-n.done
	if n.err != nil {
		t.Fatalf("final start: %v\n%s", n.err, n.out.String())
	}
	redone, err := workRedone(n.out.String())
	if err != nil {
		t.Fatalf("final start after a machine loss: %v\n%s", err, n.out.String())
	}
	t.Logf("the final start reported work_redone_at_most=%s", redone)
	pulled := filepath.Join(t.TempDir(), "pulled")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := mirror.Pull(ctx, c, prefix, pulled); err != nil {
		t.Fatal(err)
	}
	return pulled
}

// redoneRE matches the report a resume after a machine loss prints
// (runner/rundir.go): the lost holder's work after its last shipment.
var redoneRE = regexp.MustCompile(`msg="resuming from the bucket: work after its last shipment is redone".* previous_holder=\S+ .*work_redone_at_most=(\S+)`)

// workRedone finds the resume's report of the work a lost machine did
// after its last shipment, and its bound.
func workRedone(out string) (time.Duration, error) {
	m := redoneRE.FindStringSubmatch(out)
	if m == nil {
		return 0, errors.New("no report of the work redone after the lost machine's last shipment")
	}
	d, err := time.ParseDuration(m[1])
	if err != nil || d < 0 {
		return 0, fmt.Errorf("work_redone_at_most=%s: not a duration of zero or more", m[1])
	}
	return d, nil
}

var stormArgs = []string{"store.lease_s=1", "store.sync_interval_s=0.2", "run.max_steps=30"}

// TestMachineLossStormDeterministic: a deterministic run whose machine is
// lost 10 times ends, in the bucket, bit-identical to an uninterrupted run
// (weights, the prompts of every step, every call's tokens and logprobs).
func TestMachineLossStormDeterministic(t *testing.T) {
	bin, srv, c := needS3E2E(t)
	ref := filepath.Join(t.TempDir(), "ref")
	t0 := time.Now()
	train(t, bin, tinyConfig(t), ref, "run.max_steps=30")
	pulled := storm(t, bin, srv, c, "storm-det", 10, 5, time.Since(t0)/30, stormArgs)
	if d := differs(t, ref, pulled); d != "" {
		t.Fatalf("after 10 machine losses the run differs from the uninterrupted one: %s", d)
	}
}

// TestMachineLossStormThroughput: the same storm in throughput mode trains
// every admitted prompt group exactly once, in admission order, and the
// final log holds every call once.
func TestMachineLossStormThroughput(t *testing.T) {
	bin, srv, c := needS3E2E(t)
	ref := filepath.Join(t.TempDir(), "ref")
	t0 := time.Now()
	train(t, bin, tinyConfig(t), ref, "run.max_steps=60", "run.mode=throughput")
	pulled := storm(t, bin, srv, c, "storm-tp", 10, 9, time.Since(t0)/60, append(slices.Clone(stormArgs), "run.mode=throughput", "run.max_steps=60"))
	checkTrainedOnceInOrder(t, pulled, 60)
}

func checkTrainedOnceInOrder(t *testing.T, dir string, steps int64) {
	t.Helper()
	ctx := context.Background()
	rep, err := runlog.Inspect(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Step != steps {
		t.Fatalf("the run reached step %d, want %d", rep.Step, steps)
	}
	l, err := runlog.Open(ctx, dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var admitted []string
	calls := map[string]int{}
	err = l.Events(ctx, func(_ runlog.Offset, ev runlog.Event) error {
		switch e := ev.(type) {
		case runlog.PromptAdmitted:
			admitted = append(admitted, e.Group.String())
		case runlog.CallFinished:
			calls[fmt.Sprintf("%s/%d", e.Rollout, e.Call)]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var trained []string
	for _, st := range rep.Trained {
		trained = append(trained, st.GroupIDs...)
	}
	if len(trained) > len(admitted) || !slices.Equal(trained, admitted[:len(trained)]) {
		t.Fatalf("trained groups are not the admitted ones in admission order:\ntrained  %v\nadmitted %v", trained, admitted)
	}
	seen := map[string]bool{}
	for _, g := range trained {
		if seen[g] {
			t.Fatalf("group %s trained twice", g)
		}
		seen[g] = true
	}
	for k, n := range calls {
		if n != 1 {
			t.Fatalf("call %s is in the log %d times", k, n)
		}
	}
}

// manifestKeys returns the objects the bucket's manifest names now.
func manifestKeys(t *testing.T, c *bucket.Client, prefix string) (map[string]bool, *mirror.Manifest) {
	t.Helper()
	b, _, err := c.Get(context.Background(), prefix+"/manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	var m mirror.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, e := range m.Files {
		for _, p := range e.Parts {
			keys[p.Key] = true
		}
	}
	return keys, &m
}

func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTwoControllersOneRun: a second controller on another directory is
// refused while the first renews its lease; once the first is paused
// (SIGSTOP) past its lease, a third takes the run over, and the first,
// continued (SIGCONT), stops with the takeover error and writes nothing
// the winner reads: every object the final manifest names was named when
// the first was paused or written under the winner's epoch, and the run
// ends bit-identical to an uninterrupted one.
func TestTwoControllersOneRun(t *testing.T) {
	bin, srv, c := needS3E2E(t)
	args := []string{"store.lease_s=2", "store.sync_interval_s=0.2", "run.max_steps=60"}
	ref := filepath.Join(t.TempDir(), "ref")
	train(t, bin, tinyConfig(t), ref, "run.max_steps=60")
	url := "s3://" + c.Bucket() + "/two"
	first := startNode(t, bin, srv.Env(), url, filepath.Join(t.TempDir(), "first"), "", args...)
	waitUntil(t, "the first controller to ship", 60*time.Second, func() bool {
		_, _, err := c.Get(context.Background(), "two/manifest.json")
		if err != nil {
			return false
		}
		_, m := manifestKeys(t, c, "two")
		return m.LogEnd > 0
	})
	second := startNode(t, bin, srv.Env(), url, filepath.Join(t.TempDir(), "second"), "", args...)
	<-second.done
	if second.err == nil || !strings.Contains(second.out.String(), "held by another controller") {
		t.Fatalf("the second controller was not refused: %v\n%s", second.err, second.out.String())
	}
	if err := first.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	atStop, _ := manifestKeys(t, c, "two")
	third := startNode(t, bin, srv.Env(), url, filepath.Join(t.TempDir(), "third"), "", args...)
	waitUntil(t, "the third controller to take over", 60*time.Second, func() bool {
		_, m := manifestKeys(t, c, "two")
		return m.Epoch >= 2
	})
	if err := first.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	<-first.done
	if first.err == nil || !strings.Contains(first.out.String(), "took this run over") {
		t.Fatalf("the continued first controller did not stop with the takeover: %v\n%s", first.err, first.out.String())
	}
	<-third.done
	if third.err != nil {
		t.Fatalf("the winner: %v\n%s", third.err, third.out.String())
	}
	final, m := manifestKeys(t, c, "two")
	for k := range final {
		if !atStop[k] && keyEpochOf(k) < m.Epoch {
			t.Fatalf("the final manifest names %s, written by an earlier epoch after the first controller was paused", k)
		}
	}
	pulled := filepath.Join(t.TempDir(), "pulled")
	if _, err := mirror.Pull(context.Background(), c, "two", pulled); err != nil {
		t.Fatal(err)
	}
	if d := differs(t, ref, pulled); d != "" {
		t.Fatalf("the run taken over differs from the uninterrupted one: %s", d)
	}
}

func keyEpochOf(key string) uint64 {
	var e, s uint64
	fmt.Sscanf(filepath.Base(key), "%d.%d", &e, &s)
	return e
}

// TestBucketOutageWaitedOut: the bucket's server is stopped (SIGKILL) for
// 35 seconds mid-run; the run goes on from its local cache, ships again
// once the server is back, and ends normally; the bucket then holds the
// whole run (its summary equals the cache's).
func TestBucketOutageWaitedOut(t *testing.T) {
	if os.Getenv(EnvS3E2E) == "" {
		t.Skipf("skipped: whole-machine loss tests run with %s=1 (.ci/steps/41-s3-machine-loss.sh)", EnvS3E2E)
	}
	bin := binary(t)
	srv := s3test.Start(t)
	c := srv.MakeBucket(t, "outage")
	cache := filepath.Join(t.TempDir(), "node")
	n := startNode(t, bin, srv.Env(), "s3://outage/run", cache, "", "store.lease_s=5", "store.sync_interval_s=0.5", "run.max_steps=300")
	waitUntil(t, "step 5", 120*time.Second, func() bool { return lines(cache) >= 5 })
	srv.Stop()
	down := time.Now()
	before := lines(cache)
	time.Sleep(35 * time.Second)
	select {
	case <-n.done:
		if n.err != nil {
			t.Fatalf("the run ended during the outage: %v\n%s", n.err, n.out.String())
		}
	default:
	}
	during := lines(cache) - before
	srv.Restart(t)
	t.Logf("outage of %s; the run trained %d steps during it", time.Since(down).Round(time.Second), during)
	<-n.done
	if n.err != nil {
		t.Fatalf("the run failed: %v\n%s", n.err, n.out.String())
	}
	if during < 1 {
		t.Fatalf("the run trained no step during the outage")
	}
	if !strings.Contains(n.out.String(), "shipping failed") {
		t.Fatalf("the run never noticed the outage:\n%s", n.out.String())
	}
	pulled := filepath.Join(t.TempDir(), "pulled")
	if _, err := mirror.Pull(context.Background(), c, "run", pulled); err != nil {
		t.Fatal(err)
	}
	if d := differs(t, cache, pulled); d != "" {
		t.Fatalf("after the outage the bucket's copy differs from the run: %s", d)
	}
}
