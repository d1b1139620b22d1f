package plugin

import (
	"context"
	"log/slog"

	"github.com/wovyr/wovyr/internal/wasmcapi"
)

// A call keeps this much of what its plugin logs; the rest is counted.
const (
	maxLogEntries = 100
	maxLogBytes   = 64 << 10
)

// LogEntry is one wovyr:host/log entry, as a call's result carries it.
type LogEntry struct {
	Level   string            `json:"level"` // debug, info, warn, error
	Message string            `json:"message"`
	Fields  map[string]string `json:"fields,omitempty"`
}

var slogLevels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

// logEntry is wovyr:host/log.log(level, message, fields): kept in the
// call's result while it is under its caps, and written to the node's log
// with whose it is.
func (h *Host) logEntry(ctx context.Context, args []wasmcapi.Val) (*wasmcapi.Val, error) {
	st := stateOf(ctx)
	if st == nil {
		return nil, noState(hostLog)
	}
	e := LogEntry{Level: args[0].Str, Message: args[1].Str}
	size := len(e.Message)
	attrs := []any{"tenant", st.tenant, "plugin", st.plugin, "invocation", st.invocation}
	for _, p := range pairs(args[2]) {
		if e.Fields == nil {
			e.Fields = map[string]string{}
		}
		e.Fields[p[0]] = p[1]
		size += len(p[0]) + len(p[1])
		attrs = append(attrs, "field."+p[0], p[1])
	}
	if len(st.logs) >= maxLogEntries || st.logBytes+size > maxLogBytes {
		st.logsDropped++
		return nil, nil
	}
	st.logs = append(st.logs, e)
	st.logBytes += size
	h.cfg.Log.Log(ctx, slogLevels[e.Level], "plugin: "+e.Message, attrs...)
	return nil, nil
}
