package failure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
)

func TestStatus(t *testing.T) {
	for code, want := range map[int]string{500: Infra, 503: Infra, 408: Infra, 429: Infra, 400: Data, 404: Data, 413: Data, 422: Data} {
		if got := Status(code); got != want {
			t.Errorf("Status(%d) = %s, want %s", code, got, want)
		}
	}
}

func TestIsInfra(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{context.Canceled, true},
		{&net.OpError{Op: "dial", Err: errors.New("refused")}, true},
		{fmt.Errorf("read answer: %w", io.ErrUnexpectedEOF), true},
		{errors.New("bad json"), false},
		{io.EOF, false},
	} {
		if got := IsInfra(tc.err); got != tc.want {
			t.Errorf("IsInfra(%v) = %v", tc.err, got)
		}
	}
}

func TestValid(t *testing.T) {
	for c, want := range map[string]bool{Infra: true, Data: true, "": false, "Infra": false, "other": false} {
		if got := Valid(c); got != want {
			t.Errorf("Valid(%q) = %v, want %v", c, got, want)
		}
	}
}
