package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
)

// phaseNames are the invocation log line's timings, in path order.
var phaseNames = []string{"accept_ms", "record_ms", "queue_ms", "prepare_ms", "run_ms", "commit_ms", "total_ms"}

// invocationLines calls each with every invocation log line the daemon
// has written so far.
func (d *benchDaemon) invocationLines(each func(line map[string]any)) error {
	f, err := os.Open(filepath.Join(d.dir, "serve.log"))
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == "invocation" {
			each(line)
		}
	}
	return sc.Err()
}

// printPhases reads the daemon's invocation log lines and prints, per
// backend, the median of each phase: where a round trip's time goes inside
// the daemon.
func (d *benchDaemon) printPhases(out io.Writer, backends []string) error {
	samples := map[string]map[string][]float64{}
	err := d.invocationLines(func(line map[string]any) {
		b, _ := line["backend"].(string)
		if samples[b] == nil {
			samples[b] = map[string][]float64{}
		}
		for _, p := range phaseNames {
			if v, ok := line[p].(float64); ok {
				samples[b][p] = append(samples[b][p], v)
			}
		}
	})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 1, ' ', 0)
	fmt.Fprint(tw, "| daemon phase p50 (ms)")
	for _, p := range phaseNames {
		fmt.Fprintf(tw, "\t| %s", p[:len(p)-3])
	}
	fmt.Fprintln(tw, " |")
	fmt.Fprint(tw, "|---")
	for range phaseNames {
		fmt.Fprint(tw, "\t|---")
	}
	fmt.Fprintln(tw, " |")
	for _, b := range backends {
		fmt.Fprintf(tw, "| %s (n=%d)", b, len(samples[b]["total_ms"]))
		for _, p := range phaseNames {
			fmt.Fprintf(tw, "\t| %.2f", median(samples[b][p]))
		}
		fmt.Fprintln(tw, " |")
	}
	return tw.Flush()
}
