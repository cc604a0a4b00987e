package httpenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"

	"github.com/longhaul-rl/longhaul/failure"

	"github.com/longhaul-rl/longhaul/env"
)

// maxBody bounds request bodies; environment messages are small.
const maxBody = 8 << 20

// Server serves the environments of a registry. Each session is one
// environment instance; calls on one session are serialised.
type Server struct {
	reg *env.Registry
	log *slog.Logger
	// MaxSessions bounds open sessions (0: unbounded); beyond it reset
	// answers 503 so clients back off and retry.
	MaxSessions int

	// MaxKeys bounds the stored step results (0: DefaultMaxKeys); the
	// oldest are forgotten first.
	MaxKeys int

	mu       sync.Mutex
	next     uint64
	sessions map[string]*session
	keys     *keyStore
}

// DefaultMaxKeys is the number of step results a server remembers.
const DefaultMaxKeys = 1 << 20

type session struct {
	mu  sync.Mutex
	env env.Environment
	// applied holds the keys whose step this instance has taken, so a
	// repeated key is answered from the store without moving the state.
	applied map[string]bool
}

// NewServer returns a server for reg; log may be nil.
func NewServer(reg *env.Registry, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{reg: reg, log: log, sessions: map[string]*session{}, keys: &keyStore{m: map[string]storedStep{}}}
}

// Sessions returns the number of open sessions.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// httpError carries a status and class to the reply.
type httpError struct {
	status int
	class  string
	err    error
}

func (e *httpError) Error() string { return e.err.Error() }

func bad(status int, format string, a ...any) error {
	class := failure.Data
	if status >= 500 {
		class = failure.Infra
	}
	return &httpError{status: status, class: class, err: fmt.Errorf(format, a...)}
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		s.reply(w, r, nil, bad(http.StatusMethodNotAllowed, "httpenv: %s needs POST", r.URL.Path))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		s.reply(w, r, nil, bad(http.StatusBadRequest, "httpenv: unreadable or oversized body"))
		return
	}
	ctx := r.Context()
	var out any
	switch r.URL.Path {
	case PathReset:
		out, err = s.reset(ctx, body)
	case PathStep:
		out, err = s.step(ctx, body)
	case PathSnapshot:
		out, err = s.snapshot(ctx, body)
	case PathRestore:
		out, err = s.restore(ctx, body)
	case PathClose:
		out, err = s.close(ctx, body)
	default:
		err = bad(http.StatusNotFound, "httpenv: no endpoint %s", r.URL.Path)
	}
	s.reply(w, r, out, err)
}

func (s *Server) reply(w http.ResponseWriter, r *http.Request, out any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		var he *httpError
		if !errors.As(err, &he) {
			// An environment's own error is about the episode: data.
			he = &httpError{status: http.StatusUnprocessableEntity, class: failure.Data, err: err}
		}
		s.log.Debug("httpenv error", "path", r.URL.Path, "status", he.status, "err", err)
		w.WriteHeader(he.status)
		_ = json.NewEncoder(w).Encode(ErrorReply{Error: ErrorBody{Class: he.class, Message: err.Error()}})
		return
	}
	_ = json.NewEncoder(w).Encode(out)
}

func decode(body []byte, dst any) error {
	if err := json.Unmarshal(body, dst); err != nil {
		return bad(http.StatusBadRequest, "httpenv: bad request body: %v", err)
	}
	return nil
}

func (s *Server) open(e env.Environment) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.MaxSessions > 0 && len(s.sessions) >= s.MaxSessions {
		return "", bad(http.StatusServiceUnavailable, "httpenv: %d sessions open", len(s.sessions))
	}
	s.next++
	id := "s" + strconv.FormatUint(s.next, 10)
	s.sessions[id] = &session{env: e, applied: map[string]bool{}}
	return id, nil
}

func (s *Server) get(id string) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.sessions[id]
	if !ok {
		return nil, bad(http.StatusNotFound, "httpenv: no session %q", id)
	}
	return ss, nil
}

func (s *Server) newEnv(name string, params json.RawMessage) (env.Environment, error) {
	e, err := s.reg.New(name, params)
	if errors.Is(err, env.ErrUnknown) {
		return nil, &httpError{status: http.StatusNotFound, class: failure.Data, err: err}
	}
	if err != nil {
		return nil, &httpError{status: http.StatusBadRequest, class: failure.Data, err: err}
	}
	return e, nil
}

func (s *Server) reset(ctx context.Context, body []byte) (any, error) {
	var req ResetRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	name := req.Env
	if name == "" {
		name = req.Task.Env
	}
	e, err := s.newEnv(name, req.Params)
	if err != nil {
		return nil, err
	}
	if ctx, err = keyCtx(ctx, req.Key); err != nil {
		return nil, err
	}
	if req.Key != "" && s.keys.seen(req.Key) {
		// A repeated reset starts a fresh instance of an episode whose
		// effects already happened.
		ctx = env.WithReplay(ctx)
	}
	rep := ResetReply{Version: 2}
	if me, ok := e.(env.MessageEnvironment); ok {
		if rep.Messages, rep.Tools, err = me.ResetMessages(ctx, req.Task, req.Seed); err != nil {
			return nil, err
		}
		rep.Observation = env.RenderMessages(rep.Messages)
	} else {
		if rep.Observation, err = e.Reset(ctx, req.Task, req.Seed); err != nil {
			return nil, err
		}
		rep.Messages = []env.Message{{Role: "user", Content: rep.Observation}}
	}
	if req.Version < 2 {
		rep.Version, rep.Messages, rep.Tools = 0, nil, nil
	}
	if rep.ID, err = s.open(e); err != nil {
		return nil, err
	}
	if req.Key != "" {
		s.keys.put(req.Key, storedStep{}, s.maxKeys())
	}
	_, rep.Snapshot = e.(env.Snapshotter)
	return rep, nil
}

func (s *Server) maxKeys() int {
	if s.MaxKeys > 0 {
		return s.MaxKeys
	}
	return DefaultMaxKeys
}

// keyCtx puts a request's idempotency key in ctx for the environment.
func keyCtx(ctx context.Context, key string) (context.Context, error) {
	if key == "" {
		return ctx, nil
	}
	k, err := env.ParseKey(key)
	if err != nil {
		return nil, bad(http.StatusBadRequest, "httpenv: %v", err)
	}
	return env.WithKey(ctx, k), nil
}

func (s *Server) step(ctx context.Context, body []byte) (any, error) {
	var req StepRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	ss, err := s.get(req.ID)
	if err != nil {
		return nil, err
	}
	if ctx, err = keyCtx(ctx, req.Key); err != nil {
		return nil, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if req.Key == "" {
		return s.apply(ctx, ss, req)
	}
	if st, ok := s.keys.get(req.Key); ok && st.reply != nil {
		// A repeated key: the stored answer, and the instance brought to
		// the state after the step (restored, or stepped as a replay so
		// an environment skips its side effects).
		switch sn, canSnap := ss.env.(env.Snapshotter); {
		case canSnap && st.state != nil:
			if err := sn.Restore(ctx, st.state); err != nil {
				return nil, err
			}
		case !ss.applied[req.Key]:
			if _, err := s.apply(env.WithReplay(ctx), ss, req); err != nil {
				return nil, err
			}
		}
		ss.applied[req.Key] = true
		return *st.reply, nil
	}
	rep, err := s.apply(ctx, ss, req)
	if err != nil {
		return nil, err
	}
	st := storedStep{reply: &rep}
	if sn, ok := ss.env.(env.Snapshotter); ok {
		if st.state, err = sn.Snapshot(ctx); err != nil {
			return nil, err
		}
	}
	s.keys.put(req.Key, st, s.maxKeys())
	ss.applied[req.Key] = true
	return rep, nil
}

// apply takes one step of the session's environment.
func (s *Server) apply(ctx context.Context, ss *session, req StepRequest) (StepReply, error) {
	if me, ok := ss.env.(env.MessageEnvironment); ok && req.Message != nil {
		res, err := me.StepMessage(ctx, *req.Message)
		if err != nil {
			return StepReply{}, err
		}
		return StepReply{StepResult: env.StepResult{Observation: env.RenderMessages(res.Messages), Reward: res.Reward,
			Done: res.Done, Success: res.Success, Info: res.Info}, Messages: res.Messages}, nil
	}
	res, err := ss.env.Step(ctx, req.Action)
	if err != nil {
		return StepReply{}, err
	}
	rep := StepReply{StepResult: res}
	if req.Message != nil && res.Observation != "" {
		rep.Messages = []env.Message{{Role: "user", Content: res.Observation}}
	}
	return rep, nil
}

func (s *Server) snapshot(ctx context.Context, body []byte) (any, error) {
	var req IDRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	ss, err := s.get(req.ID)
	if err != nil {
		return nil, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	sn, ok := ss.env.(env.Snapshotter)
	if !ok {
		return nil, bad(http.StatusNotImplemented, "httpenv: environment cannot snapshot")
	}
	st, err := sn.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return SnapshotReply{State: st}, nil
}

func (s *Server) restore(ctx context.Context, body []byte) (any, error) {
	var req RestoreRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if req.ID == "" {
		e, err := s.newEnv(req.Env, req.Params)
		if err != nil {
			return nil, err
		}
		sn, ok := e.(env.Snapshotter)
		if !ok {
			return nil, bad(http.StatusNotImplemented, "httpenv: environment cannot restore")
		}
		if err := sn.Restore(ctx, req.State); err != nil {
			return nil, err
		}
		id, err := s.open(e)
		return RestoreReply{ID: id}, err
	}
	ss, err := s.get(req.ID)
	if err != nil {
		return nil, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	sn, ok := ss.env.(env.Snapshotter)
	if !ok {
		return nil, bad(http.StatusNotImplemented, "httpenv: environment cannot restore")
	}
	if err := sn.Restore(ctx, req.State); err != nil {
		return nil, err
	}
	return RestoreReply{ID: req.ID}, nil
}

func (s *Server) close(ctx context.Context, body []byte) (any, error) {
	var req IDRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	s.mu.Lock()
	ss, ok := s.sessions[req.ID]
	delete(s.sessions, req.ID)
	s.mu.Unlock()
	if !ok {
		return struct{}{}, nil // closing twice is fine: close is retried
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if err := ss.env.Close(ctx); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}
