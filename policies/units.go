package policies

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Size is a byte count written for humans: a plain number of bytes
// ("1048576") or a number with a binary suffix ("64K", "256M", "1G", "2T";
// "KiB"/"KB"/"M"/"MiB"... all mean powers of 1024). The empty Size means
// "not set".
type Size string

var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
	"t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}

var errNotSize = errors.New("not a size")

// Bytes returns the size in bytes; 0 for the empty Size.
func (s Size) Bytes() (int64, error) {
	if s == "" {
		return 0, nil
	}
	str := strings.TrimSpace(string(s))
	i := 0
	for i < len(str) && str[i] >= '0' && str[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, errNotSize
	}
	n, err := strconv.ParseInt(str[:i], 10, 64)
	if err != nil {
		return 0, errNotSize
	}
	suffix := strings.TrimSpace(str[i:])
	// ASCII only: strings.ToLower maps the Kelvin sign (U+212A) to 'k'.
	unit, ok := sizeUnits[strings.ToLower(suffix)]
	if !ok || strings.ContainsFunc(suffix, func(r rune) bool { return r >= utf8.RuneSelf }) {
		return 0, errNotSize
	}
	if n > math.MaxInt64/unit {
		return 0, errors.New("too large")
	}
	return n * unit, nil
}

// Duration is a wall-clock duration in Go syntax ("30s", "1m30s", "500ms").
// The empty Duration means "not set".
type Duration string

// Duration returns the parsed duration; 0 for the empty Duration.
func (d Duration) Duration() (time.Duration, error) {
	if d == "" {
		return 0, nil
	}
	v, err := time.ParseDuration(string(d))
	if err != nil {
		return 0, fmt.Errorf("not a duration")
	}
	return v, nil
}
