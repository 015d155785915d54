package main

import (
	"fmt"
	"io"
	"strings"
)

// printTable prints one tool's rows as a markdown table with the ratios to
// the moat run row.
func printTable(w io.Writer, tool string, rows []row) {
	var ref *row
	for i := range rows {
		if rows[i].name == "moat run" && rows[i].failed == "" {
			ref = &rows[i]
		}
	}
	fmt.Fprintf(w, "### tool: %s\n\n", tool)
	fmt.Fprintln(w, "| runner | median ms | p95 ms | median / moat | seq runs/s | 2-parallel runs/s | 2-par / moat |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		if r.failed != "" {
			fmt.Fprintf(w, "| %s | failed: %s | | | | | |\n", r.name, oneLine(r.failed))
			continue
		}
		ratio, parRatio := "", ""
		if ref != nil {
			ratio = fmt.Sprintf("%.2fx", float64(r.median)/float64(ref.median))
			parRatio = fmt.Sprintf("%.2fx", r.parRate/ref.parRate)
		}
		fmt.Fprintf(w, "| %s | %.2f | %.2f | %s | %.0f | %.0f | %s |\n", r.name,
			ms(r.median), ms(r.p95), ratio, r.seqRate, r.parRate, parRatio)
	}
	fmt.Fprintln(w)
}

func ms(d interface{ Seconds() float64 }) float64 { return d.Seconds() * 1000 }

func oneLine(s string) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), "\n", " ")
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}
