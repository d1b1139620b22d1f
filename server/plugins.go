package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/plugin"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// Component plugins (/v1/plugins): an admin installs a component with its
// manifest; any tenant lists them and calls their functions. The host
// (package plugin) checks everything at install; the store keeps each
// manifest and component so a restart installs them again (restorePlugins).

var errNoPlugins = sandbox.Errorf(Unavailable, "", "this daemon hosts no plugins")

// restorePlugins installs every plugin the store holds. One that no longer
// loads (its signing key left the trust store, the host's limits shrank)
// is logged and left out, not deleted: fixing the config brings it back.
func (s *Server) restorePlugins() {
	if s.plugins == nil {
		return
	}
	n := 0
	err := s.store.EachPlugin(func(rec store.Plugin, wasm []byte) error {
		m, err := plugin.ParseManifest(rec.Manifest)
		if err == nil {
			_, err = s.plugins.Load(m, wasm)
		}
		if err != nil {
			s.log.Warn("plugin not loaded", "plugin", rec.Name, "error", err.Error())
			return nil
		}
		n++
		return nil
	})
	if err != nil {
		s.log.Error("restore plugins", "error", err)
	}
	s.log.Info("plugins", "loaded", n)
}

// handlePluginInstall is POST /v1/plugins (admin): the host checks it all
// (400 naming the field; 409 for a floor above wasm), then the store keeps
// it; 201 with the plugin's view.
func (s *Server) handlePluginInstall(w http.ResponseWriter, r *http.Request, _ *tenant) {
	if s.plugins == nil {
		s.writeError(w, errNoPlugins)
		return
	}
	var req client.PluginInstall
	if err := s.decodeBody(w, r, &req, "plugin install"); err != nil {
		s.writeError(w, err)
		return
	}
	if len(bytes.TrimSpace(req.Manifest)) == 0 || len(req.Component) == 0 {
		s.writeError(w, sandbox.Errorf(sandbox.BadInput, "", "an install needs a manifest and a component"))
		return
	}
	m, err := plugin.ParseManifest(req.Manifest)
	if err != nil {
		s.writeError(w, err)
		return
	}
	info, err := s.plugins.Load(m, req.Component)
	if err != nil {
		s.writeError(w, err)
		return
	}
	rec := store.Plugin{Name: m.Name, Manifest: req.Manifest, Component: m.Component, Installed: time.Now().UTC()}
	if err := s.store.PutPlugin(rec, req.Component); err != nil {
		_ = s.plugins.Remove(m.Name)
		s.writeError(w, sandbox.Wrap(sandbox.BackendFailure, err, "store plugin"))
		return
	}
	s.log.Info("plugin installed", "plugin", m.Name, "component", m.Component, "trust", m.Trust.String(), "capabilities", info.Capabilities)
	writeJSON(w, http.StatusCreated, info)
}

// handlePluginList is GET /v1/plugins.
func (s *Server) handlePluginList(w http.ResponseWriter, r *http.Request, _ *tenant) {
	list := []plugin.Info{}
	if s.plugins != nil {
		list = s.plugins.List()
	}
	writeJSON(w, http.StatusOK, map[string][]plugin.Info{"plugins": list})
}

// pluginInfo is the installed plugin name's view, or not-found.
func (s *Server) pluginInfo(name string) (*plugin.Info, error) {
	if s.plugins == nil {
		return nil, errNoPlugins
	}
	for _, p := range s.plugins.List() {
		if p.Name == name {
			return &p, nil
		}
	}
	return nil, sandbox.Errorf(NotFound, "", "no plugin %q", name)
}

// handlePluginGet is GET /v1/plugins/{name}.
func (s *Server) handlePluginGet(w http.ResponseWriter, r *http.Request, _ *tenant) {
	info, err := s.pluginInfo(r.PathValue("name"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// handlePluginRemove is DELETE /v1/plugins/{name} (admin): calls in flight
// finish; 200 with what was removed.
func (s *Server) handlePluginRemove(w http.ResponseWriter, r *http.Request, _ *tenant) {
	name := r.PathValue("name")
	info, err := s.pluginInfo(name)
	if err != nil {
		s.writeError(w, err)
		return
	}
	if err := s.store.DeletePlugin(name); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.writeError(w, sandbox.Wrap(sandbox.BackendFailure, err, "remove plugin"))
		return
	}
	if err := s.plugins.Remove(name); err != nil {
		s.writeError(w, err)
		return
	}
	s.log.Info("plugin removed", "plugin", name)
	writeJSON(w, http.StatusOK, info)
}

// handlePluginCall is POST /v1/plugins/{name}/call: arguments that do not
// match the function's WIT signature are 400 naming the parameter and
// nothing runs; otherwise 200 with how the call ended. The tenant's rate
// guard applies as to a submission.
func (s *Server) handlePluginCall(w http.ResponseWriter, r *http.Request, t *tenant) {
	if s.plugins == nil {
		s.writeError(w, errNoPlugins)
		return
	}
	if ok, after := t.rate.take(time.Now()); !ok {
		s.writeError(w, retryAfter(sandbox.Errorf(RateLimited, "", "tenant %s is over its submission rate (%.4g/s)", t.cfg.Name, t.cfg.Rate), after))
		return
	}
	var req client.PluginCall
	if err := s.decodeBody(w, r, &req, "plugin call"); err != nil {
		s.writeError(w, err)
		return
	}
	if req.Function == "" {
		s.writeError(w, sandbox.Errorf(sandbox.BadInput, "function", "a call names its function"))
		return
	}
	res, err := s.plugins.Call(r.Context(), t.cfg.Name, r.PathValue("name"), req.Function, json.RawMessage(req.Args),
		plugin.CallOptions{Network: req.Network})
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
