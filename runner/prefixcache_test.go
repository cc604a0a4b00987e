package runner

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	gembedded "github.com/longhaul-rl/longhaul/gen/embedded"
)

// TestPrefixCacheKey: generator.prefix_cache_mib reaches every model the
// byte model's generator serves: the in-process pipeline's (before and
// after a publish), `longhaul serve`'s, and one a weights reload loads
// (the load the remote-trainer publish shares); 0 turns it off.
func TestPrefixCacheKey(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, mib := range []int64{3, 0} {
		cfg := tiny(t, "generator.prefix_cache_mib="+map[int64]string{3: "3", 0: "0"}[mib])
		want := mib << 20

		p, err := wire(ctx, cfg, t.TempDir(), nil, slog.Default(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := p.served.Model(); m.PrefixCache() != want {
			t.Fatalf("%d MiB: the in-process generator's budget is %d bytes", mib, m.PrefixCache())
		}
		if err := p.publish(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if m, v := p.served.Model(); v != 1 || m.PrefixCache() != want {
			t.Fatalf("%d MiB: after publishing, version %d with a budget of %d bytes", mib, v, m.PrefixCache())
		}
		p.close()

		be, err := EmbeddedBackend(ctx, cfg, "")
		if err != nil {
			t.Fatal(err)
		}
		eg := be.Scorer.(*gembedded.Generator)
		m, _ := eg.Model()
		if m.PrefixCache() != want {
			t.Fatalf("%d MiB: longhaul serve's budget is %d bytes", mib, m.PrefixCache())
		}
		file := filepath.Join(t.TempDir(), "model.safetensors")
		if err := m.SaveSafetensors(file); err != nil {
			t.Fatal(err)
		}
		if _, err := be.Loader.Reload(ctx, file); err != nil {
			t.Fatal(err)
		}
		if m2, _ := eg.Model(); m2 == m || m2.PrefixCache() != want {
			t.Fatalf("%d MiB: the reloaded model's budget is %d bytes", mib, m2.PrefixCache())
		}
	}
	cfg := tiny(t)
	err := cfg.ApplyOverrides([]string{"generator.prefix_cache_mib=-1"})
	if err == nil {
		err = cfg.Validate()
	}
	if err == nil || !strings.Contains(err.Error(), "generator.prefix_cache_mib") {
		t.Fatalf("generator.prefix_cache_mib=-1: %v, want an error naming the key", err)
	}
}
