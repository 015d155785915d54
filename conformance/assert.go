package conformance

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/moat-sandbox/moat/executor"
)

// ok dispatches and requires success.
func (k *kit) ok(p executor.Provider, req *executor.Request) json.RawMessage {
	k.t.Helper()
	res, err := k.dispatch(p, req)
	if err != nil {
		k.fatalf("dispatch of %s failed: %v (code %q)", req.Tool, err, executor.CodeOf(err))
	}
	return res
}

// fail dispatches and requires a rejection.
func (k *kit) fail(p executor.Provider, req *executor.Request) error {
	k.t.Helper()
	res, err := k.dispatch(p, req)
	if err == nil {
		k.fatalf("expected the dispatch to reject, it resolved with %s", res)
	}
	return err
}

// code requires err to be an *executor.Error with the code.
func (k *kit) code(err error, want executor.Code) {
	k.t.Helper()
	var e *executor.Error
	if !errors.As(err, &e) {
		k.fatalf("error %v (%T) is not an executor.Error", err, err)
	}
	if e.Code != want {
		k.fatalf("error code %q (%v), want %q", e.Code, err, want)
	}
}

func (k *kit) decode(res json.RawMessage, v any) {
	k.t.Helper()
	if err := json.Unmarshal(res, v); err != nil {
		k.fatalf("result %s does not decode: %v", res, err)
	}
}

// readEnv runs the read-env behaviour and returns the value, nil for null.
func (k *kit) readEnv(cfg Config, name string, edit func(*executor.Request)) *string {
	k.t.Helper()
	args, _ := json.Marshal(map[string]string{"behavior": "read-env", "name": name})
	req := k.request("reader", string(args))
	if edit != nil {
		edit(req)
	}
	var got struct{ Value *string }
	k.decode(k.ok(k.provider(cfg), req), &got)
	return got.Value
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
