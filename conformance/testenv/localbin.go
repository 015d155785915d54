package testenv

import (
	"os"
	"path/filepath"
)

// LocalBinOnly returns the name of an executable in /usr/local/bin that is
// in neither /usr/bin nor /bin, or "" when there is none: a bare name the
// reference's default search path, /usr/bin:/bin, does not find, where
// /usr/local/bin:/usr/bin:/bin would. Only the Go toolchain's commands are
// considered, which .ci/setup links there, so that a test that expects the
// lookup to fail never runs some other program should it succeed.
func LocalBinOnly() string {
	for _, n := range []string{"go", "gofmt"} {
		fi, err := os.Stat(filepath.Join("/usr/local/bin", n))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			continue
		}
		if exists("/usr/bin/"+n) || exists("/bin/"+n) {
			continue
		}
		return n
	}
	return ""
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
