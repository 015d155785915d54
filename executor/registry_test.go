package executor

import (
	"context"
	"encoding/json"
	"testing"
)

type fixedProvider struct{ result string }

func (f fixedProvider) Dispatch(context.Context, *Request) (json.RawMessage, error) {
	return json.RawMessage(f.result), nil
}

func TestRegistryBindRefusesUnregisteredTags(t *testing.T) {
	var r Registry
	if err := r.Register("subprocess", fixedProvider{"1"}); err != nil {
		t.Fatal(err)
	}
	if err := r.Bind(Tool{Name: "a"}, Tool{Name: "b", Executor: "inprocess"}, Tool{Name: "c", Executor: "subprocess"}); err != nil {
		t.Fatalf("Bind of registered tools: %v", err)
	}
	err := r.Bind(Tool{Name: "charge", Executor: "container"})
	want := "tool 'charge' declares executor 'container', but no such executor is registered; register one via createEngine({ executors }) (https://docs.rulvar.com/guide/isolated-executor)"
	if CodeOf(err) != CodeConfig || err.Error() != want {
		t.Fatalf("Bind err = %v", err)
	}
	if err := r.Bind(Tool{Name: "bad name"}); CodeOf(err) != CodeConfig {
		t.Fatalf("a bad tool name bound: %v", err)
	}
}

func TestRegistryRegisterOnlyIsolatedTags(t *testing.T) {
	var r Registry
	for _, tag := range []string{"inprocess", "native", ""} {
		if err := r.Register(tag, fixedProvider{"1"}); CodeOf(err) != CodeConfig {
			t.Errorf("Register(%q) = %v, want a config error", tag, err)
		}
	}
}

func TestRegistryDispatchRoutesByTag(t *testing.T) {
	var r Registry
	_ = r.Register("subprocess", fixedProvider{"1"})
	_ = r.Register("container", fixedProvider{"2"})
	for tag, want := range map[string]string{"": "1", "subprocess": "1", "container": "2"} {
		got, err := r.Dispatch(context.Background(), &Request{Executor: tag, Tool: "t"})
		if err != nil || string(got) != want {
			t.Errorf("tag %q: %s, %v", tag, got, err)
		}
	}
	var empty Registry
	_, err := empty.Dispatch(context.Background(), &Request{Executor: "container", Tool: "t"})
	if CodeOf(err) != CodeConfig || err.Error() != "no executor registered for 'container'; register one via createEngine({ executors }) (https://docs.rulvar.com/guide/isolated-executor)" {
		t.Fatalf("err = %v", err)
	}
}
