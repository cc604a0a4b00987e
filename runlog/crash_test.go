package runlog

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const (
	crashEnvDir   = "RUNLOG_CRASH_CHILD_DIR"
	crashWriters  = 4
	crashChunkLen = 32 << 10
)

// TestCrashChild is the child of TestCrashKill: it appends calls from
// several goroutines until killed, printing "member call" after each
// Append returns.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashEnvDir)
	if dir == "" {
		t.Skip("only runs as the child of TestCrashKill")
	}
	l, err := Open(context.Background(), dir, Options{ChunkSize: crashChunkLen})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(3)
	}
	g := NewGroupID(testSeed, 0, 0)
	var next [crashWriters]uint32
	var started bool
	l.View(func(s *State) {
		started = s.Started
		if r := s.Groups[g]; r != nil {
			for m := range crashWriters {
				next[m] = uint32(len(r.Members[m].Calls))
			}
		}
	})
	if !started {
		evs := []Event{RunStarted{Seed: testSeed, Mode: "throughput"}, PromptAdmitted{Group: g, Size: crashWriters}}
		for m := range crashWriters {
			evs = append(evs, AttemptStarted{Rollout: RolloutID{g, uint16(m)}, Attempt: 1})
		}
		if _, err := l.Append(context.Background(), evs...); err != nil {
			fmt.Println("setup:", err)
			os.Exit(3)
		}
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for m := range crashWriters {
		wg.Go(func() {
			id := RolloutID{g, uint16(m)}
			for c := next[m]; ; c++ {
				if _, err := l.Append(context.Background(), crashCall(id, c)); err != nil {
					fmt.Println("append:", err)
					os.Exit(3)
				}
				mu.Lock()
				fmt.Fprintf(out, "%d %d\n", m, c)
				out.Flush()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// crashCall is call c of rollout id: its tokens depend only on (id, c).
func crashCall(id RolloutID, c uint32) CallFinished {
	v := int(id.Member)*100000 + int(c)
	ev := testCall(id, 1, c, v)
	ev.Sampled = append(ev.Sampled, make([]int32, int(c%50))...) // vary the record sizes
	ev.Logprobs = append(ev.Logprobs, make([]float32, int(c%50))...)
	ev.PromptPrefix = 0
	if c > 0 {
		ev.PromptPrefix = crashCtx(c - 1)
	}
	return ev
}

// crashCtx is the context length after call c.
func crashCtx(c uint32) uint32 {
	var n uint32
	for i := uint32(0); i <= c; i++ {
		n += 2 + 1 + i%50 // suffix + sampled
	}
	return n
}

// TestCrashKill kills a child appending in a loop with SIGKILL at random
// moments; after each kill, every append that had returned is in the log,
// with its tokens, and nothing else is (beyond at most the one append per
// writer that was in flight).
func TestCrashKill(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(11, 12))
	acked := [crashWriters]int{-1, -1, -1, -1}
	g := NewGroupID(testSeed, 0, 0)
	for round := range 6 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashEnvDir+"="+dir)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Kill once the child has acknowledged something, after a random delay.
		first, ok := <-lines
		if !ok {
			cmd.Wait()
			t.Fatalf("round %d: child printed nothing", round)
		}
		time.Sleep(time.Duration(r.IntN(150)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		all := append([]string{first}, drain(lines)...)
		cmd.Wait()
		n := 0
		for _, line := range all {
			f := strings.Fields(line)
			if len(f) != 2 {
				t.Fatalf("round %d: child said %q", round, line)
			}
			m, _ := strconv.Atoi(f[0])
			c, _ := strconv.Atoi(f[1])
			acked[m] = max(acked[m], c)
			n++
		}

		l := openLog(t, dir, Options{ChunkSize: crashChunkLen})
		rec := l.Recovery()
		var have [crashWriters]int
		l.View(func(s *State) {
			for m := range crashWriters {
				have[m] = len(s.Groups[g].Members[m].Calls)
			}
		})
		for m := range crashWriters {
			if have[m] < acked[m]+1 || have[m] > acked[m]+2 {
				t.Fatalf("round %d: member %d has %d calls, acked up to call %d", round, m, have[m], acked[m])
			}
			evs, err := l.RolloutEvents(RolloutID{g, uint16(m)})
			if err != nil {
				t.Fatal(err)
			}
			for i, ev := range evs[1:] {
				if diff := cmp.Diff(Event(crashCall(RolloutID{g, uint16(m)}, uint32(i))), ev); diff != "" {
					t.Fatalf("round %d: member %d call %d (-want +got):\n%s", round, m, i, diff)
				}
			}
			acked[m] = have[m] - 1 // an unacknowledged but durable append counts from now on
		}
		t.Logf("round %d: %d acks, calls %v, recovery %+v", round, n, have, rec)
		l.Close()
	}
}

func drain(c chan string) []string {
	var out []string
	for s := range c {
		out = append(out, s)
	}
	return out
}
