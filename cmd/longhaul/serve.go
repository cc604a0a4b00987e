package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/longhaul-rl/longhaul/internal/allowpath"
	"github.com/longhaul-rl/longhaul/runner"
	"github.com/longhaul-rl/longhaul/server"
	"github.com/longhaul-rl/longhaul/tokenizer/toolcall"
)

// fakeModelName is what --fake-backend serves.
const fakeModelName = "longhaul-fake"

func newServeCmd() *cobra.Command {
	var (
		host, weights, apiKey string
		allowPaths            []string
		maxWeights            int64
		port                  int
		maxBody               int64
		fake                  bool
		cfgPath, modelDir     string
		toolParser            string
	)
	cmd := &cobra.Command{
		Use:   "serve [--weights PATH] [--config FILE] [key=value ...] | serve --model HFDIR",
		Short: "serve a generator over an OpenAI-compatible HTTP API",
		Long: `serve answers /v1/completions, /v1/chat/completions, /tokenize, /detokenize,
/v1/models, /health, /metrics and POST /update_weights_from_disk (see docs/serving.md).
It binds 127.0.0.1 unless --host says otherwise; set --api-key (or LONGHAUL_API_KEY)
before exposing it.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if apiKey == "" {
				apiKey = os.Getenv("LONGHAUL_API_KEY")
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			var be server.Backend
			var err error
			if toolParser != "" && modelDir == "" {
				return fmt.Errorf("serve: --tool-parser goes with --model (the byte model has no tool syntax)")
			}
			switch {
			case fake:
				be = server.NewFake(0).Backend(fakeModelName)
			case modelDir != "":
				if weights != "" || cfgPath != "" || len(args) > 0 {
					return fmt.Errorf("serve: --model serves an HF directory as it is; it takes no --weights, --config or key=value")
				}
				if be, err = runner.HFBackend(cmd.Context(), modelDir, runner.HFServeOptions{ToolParser: toolParser, Logger: log}); err != nil {
					return err
				}
			default:
				cfg, _, err := loadConfig(cfgPath, args)
				if err != nil {
					return err
				}
				if be, err = runner.EmbeddedBackendLimited(cmd.Context(), cfg, weights, maxWeights); err != nil {
					return err
				}
			}
			allow, err := allowpath.New(allowPaths)
			if err != nil {
				return err
			}
			s, err := server.New(be, server.Options{APIKey: apiKey, MaxBodyBytes: maxBody, Logger: log, AllowPaths: &allow})
			if err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			return listenAndServe(cmd.Context(), log, net.JoinHostPort(host, strconv.Itoa(port)), s)
		},
	}
	f := cmd.Flags()
	f.StringVar(&host, "host", "127.0.0.1", "address to bind")
	f.IntVar(&port, "port", 8000, "port to bind (0 picks a free one)")
	f.StringVar(&weights, "weights", "", "weights file (safetensors), checkpoint or run directory to serve; none: the model the config initialises from its seed")
	f.StringVar(&apiKey, "api-key", "", "require this bearer token (default $LONGHAUL_API_KEY)")
	f.Int64Var(&maxBody, "max-body-bytes", 1<<20, "largest request body accepted (413 beyond)")
	f.StringVar(&cfgPath, "config", "", "config whose model section shapes the model served without --weights (default: the embedded example)")
	f.StringVar(&modelDir, "model", "", "Hugging Face model directory (Llama/Qwen2/Qwen3) to serve with its tokenizer and chat template (docs/serving.md)")
	f.StringVar(&toolParser, "tool-parser", "", "with --model: how tool calls are read from replies, a tokenizer.tool_parser value ("+strings.Join(toolcall.Names, ", ")+"); default: the one the chat template's tool syntax names")
	f.StringSliceVar(&allowPaths, "allow-path", nil, "directory weight reloads may read from (repeatable; default: the working directory)")
	f.Int64Var(&maxWeights, "max-weights-bytes", runner.DefaultMaxWeightsBytes, "largest weights file a reload reads")
	f.BoolVar(&fake, "fake-backend", false, "serve a deterministic fake generator (for tests only)")
	_ = f.MarkHidden("fake-backend")
	return cmd
}

// listenAndServe serves h until ctx ends, then drains for up to 10s.
func listenAndServe(ctx context.Context, log *slog.Logger, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	// ReadTimeout bounds reading a whole request, body included: a client
	// that stalls mid-body cannot hold a connection (or the trainer's
	// turn) forever.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 5 * time.Minute, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	log.Info("listening", "url", "http://"+ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}
