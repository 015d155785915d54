package native_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/egress"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/policies"
)

// fetchPy fetches each URL of its args and reports what came back.
const fetchPy = `import json, sys, urllib.request
call = json.load(sys.stdin)
out = {}
for name, url in call["args"].items():
    try:
        out[name] = urllib.request.urlopen(url, timeout=20).read().decode()
    except Exception as e:
        out[name] = str(e)
print(json.dumps(out, sort_keys=True))
`

// A policy's egress section lets the tool reach the hosts it lists, and
// only those, through moat's proxy: the sandbox has no route out, and its
// HTTP(S)_PROXY variables lead to the proxy. Here the allowed name leads
// to a server on this host's loopback (egress.WithResolver in place of
// DNS), whose address the policy must admit too: the proxy refuses a name
// that resolves to a loopback or private address unless egress.cidrs
// names it.
func ExampleWithEgressProxy() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello from "+r.Host)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	proxy, err := egress.New(egress.WithResolver(egress.Hosts{
		"api.example": {netip.MustParseAddr("127.0.0.1")},
		"cdn.example": {netip.MustParseAddr("127.0.0.1")},
	}))
	if err != nil {
		log.Fatal(err)
	}
	defer proxy.Close()
	pol, err := policies.Builtin("python")
	if err != nil {
		log.Fatal(err)
	}
	pol.Egress = &policies.Egress{Allow: []string{"api.example"}, CIDRs: []string{"127.0.0.1/32"}}
	p, err := native.New(
		native.WithPolicy(pol),
		native.WithEgressProxy(proxy), // without it, the provider starts a proxy of its own
		native.WithCommand("python3", "-c", fetchPy),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	args, _ := json.Marshal(map[string]string{
		"allowed":  "http://api.example:" + port + "/",
		"unlisted": "http://cdn.example:" + port + "/",
	})
	res, err := p.Dispatch(context.Background(), &executor.Request{Tool: "fetch", Args: args, RunID: "run-1", SpanID: "span-1", IdempotencyKey: "key"})
	if err != nil {
		log.Fatal(err)
	}
	var out map[string]string
	if err := json.Unmarshal(res, &out); err != nil {
		log.Fatal(err)
	}
	fmt.Println("allowed:", out["allowed"] == "hello from api.example:"+port)
	fmt.Println("unlisted:", out["unlisted"])
	// Output:
	// allowed: true
	// unlisted: HTTP Error 403: Forbidden
}
