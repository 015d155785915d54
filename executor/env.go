package executor

import (
	"context"
)

// The three variables the pipeline injects into every tool's environment
// (contract 5.3); they overwrite anything of the same name.
const (
	EnvTool           = "RULVAR_TOOL"
	EnvRunID          = "RULVAR_RUN_ID"
	EnvIdempotencyKey = "RULVAR_IDEMPOTENCY_KEY"
)

// Credential is one minted environment variable.
type Credential struct {
	Name, Value string
}

// CredentialsFunc mints per-call environment variables (credentials); it is
// called fresh for every dispatch, after the intent row. They reach the
// tool (and the container CLI's -e list) in the order given, as the
// reference passes the object's members in insertion order; a name given
// twice keeps its first place and its last value.
type CredentialsFunc func(ctx context.Context, req *Request) ([]Credential, error)

// buildEnv builds the replaced environment in the contract's order, later
// writes winning: the allowlisted host variables that are set, then the
// minted credentials, then the three RULVAR_* variables. Nothing else.
func buildEnv(ctx context.Context, req *Request, allow []string, lookup func(string) (string, bool), creds CredentialsFunc) ([]string, error) {
	var names []string
	vals := map[string]string{}
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			names = append(names, k)
		}
		vals[k] = v
	}
	for _, name := range allow {
		if lookup == nil {
			break
		}
		if v, ok := lookup(name); ok {
			set(name, v)
		}
	}
	if creds != nil {
		minted, err := creds(ctx, req)
		if err != nil {
			return nil, err // raw, as the contract requires (5.7 step 5)
		}
		for _, c := range minted {
			set(c.Name, c.Value)
		}
	}
	set(EnvTool, req.Tool)
	set(EnvRunID, req.RunID)
	set(EnvIdempotencyKey, req.IdempotencyKey)
	env := make([]string, 0, len(names))
	for _, k := range names {
		env = append(env, k+"="+vals[k])
	}
	return env, nil
}

// envValue returns the value of name in an environment list.
func envValue(env []string, name string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if len(env[i]) > len(name) && env[i][len(name)] == '=' && env[i][:len(name)] == name {
			return env[i][len(name)+1:], true
		}
	}
	return "", false
}
