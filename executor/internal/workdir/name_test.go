//go:build linux

package workdir

import (
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCreateNamesAsMkdtemp: a workdir is prefix + six characters of
// mkdtemp's alphabet ([A-Za-z0-9], as the reference's rulvar-exec-echo-YCPIgY),
// and every character of it is drawn (12000 draws leave one of 62 out with
// a probability below 1e-80).
func TestCreateNamesAsMkdtemp(t *testing.T) {
	base := t.TempDir()
	d, err := Create(base, "rulvar-exec-echo-", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Remove(slog.New(slog.DiscardHandler))
	if filepath.Dir(d.Path) != base || !regexp.MustCompile(`^rulvar-exec-echo-[A-Za-z0-9]{6}$`).MatchString(filepath.Base(d.Path)) {
		t.Fatalf("workdir %s, want %s/rulvar-exec-echo-XXXXXX", d.Path, base)
	}
	seen := map[rune]bool{}
	for range 2000 {
		for _, c := range randomName() {
			if !strings.ContainsRune(nameChars, c) {
				t.Fatalf("character %q is not mkdtemp's", c)
			}
			seen[c] = true
		}
	}
	if len(seen) != len(nameChars) {
		t.Fatalf("%d of %d characters drawn", len(seen), len(nameChars))
	}
}
