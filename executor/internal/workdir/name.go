package workdir

import "crypto/rand"

// nameChars are the characters mkdtemp(3) (glibc's __gen_tempname), and so
// the reference's fs.mkdtemp, appends to a workdir's prefix.
const nameChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// randomName is six characters drawn uniformly from nameChars, as mkdtemp
// appends (contract 5.4: rulvar-exec-echo-YCPIgY).
func randomName() string {
	var out [6]byte
	var b [16]byte
	n := 0
	for n < len(out) {
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
		for _, c := range b {
			// 248 = 4 × 62: rejecting 248-255 keeps every character equally likely.
			if c < 248 && n < len(out) {
				out[n] = nameChars[c%62]
				n++
			}
		}
	}
	return string(out[:])
}
