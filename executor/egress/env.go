package egress

import "strings"

// Env is the proxy environment a tool gets when the sandbox's forwarder
// listens on addr ("127.0.0.1:3128"): HTTP and HTTPS through the HTTP
// proxy (CONNECT for TLS), everything else that honours ALL_PROXY through
// SOCKS5 with names resolved by the proxy (socks5h), and loopback never
// proxied. Both cases are set: curl reads http_proxy only in lower case,
// other tools read the upper case.
func Env(addr string) []string {
	http := "http://" + addr
	vars := [][2]string{
		{"HTTP_PROXY", http},
		{"HTTPS_PROXY", http},
		{"ALL_PROXY", "socks5h://" + addr},
		{"NO_PROXY", "localhost,127.0.0.1,::1"},
	}
	out := make([]string, 0, 2*len(vars))
	for _, v := range vars {
		out = append(out, v[0]+"="+v[1], strings.ToLower(v[0])+"="+v[1])
	}
	return out
}
