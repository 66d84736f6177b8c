package config

// This file holds what a reload changed: peers kept, added, removed and
// changed, and the sections that differ.

import (
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/peerd/peerd/admin"
	"github.com/peerd/peerd/forwarding"
	"github.com/peerd/peerd/peers"
)

// ReloadDiff says what a reload changes: peers kept (their state with
// them), added and removed, kept peers whose settings changed, and the
// other settings that changed, by their dotted key.
func ReloadDiff(old, cfg *File) admin.ReloadDiff {
	d := admin.ReloadDiff{Kept: []string{}, Added: []string{}, Removed: []string{}, Changed: []admin.PeerChange{}, Settings: []string{}}
	before := map[string]peers.Spec{}
	for _, p := range old.Peers {
		before[p.Name] = p.WithDefaults()
	}
	now := map[string]bool{}
	for _, p := range cfg.Peers {
		p = p.WithDefaults()
		now[p.Name] = true
		prev, ok := before[p.Name]
		if !ok {
			d.Added = append(d.Added, p.Name)
			continue
		}
		if fields := changedFields(&prev, &p); len(fields) > 0 {
			d.Changed = append(d.Changed, admin.PeerChange{Peer: p.Name, Fields: fields})
		}
		if prev.Addr() == p.Addr() {
			d.Kept = append(d.Kept, p.Name)
		}
	}
	for _, p := range old.Peers {
		if !now[p.Name] {
			d.Removed = append(d.Removed, p.Name)
		}
	}
	if !reflect.DeepEqual(old.Routes, cfg.Routes) {
		d.Settings = append(d.Settings, "route")
	}
	if !reflect.DeepEqual(rulesOnly(old.Rules), rulesOnly(cfg.Rules)) {
		d.Settings = append(d.Settings, "rule")
	}
	oldSec, newSec := Sections(old), Sections(cfg)
	for _, name := range slices.Sorted(maps.Keys(newSec)) {
		for _, f := range changedFields(oldSec[name], newSec[name]) {
			d.Settings = append(d.Settings, name+"."+f)
		}
	}
	return d
}

// changedFields lists the TOML keys whose values differ between two
// structs of one type, in field order. Secrets are compared but never
// shown by value (only their key is listed).
func changedFields(a, b any) []string {
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	var out []string
	for i := 0; i < va.NumField(); i++ {
		tag, _, _ := strings.Cut(va.Type().Field(i).Tag.Get("toml"), ",")
		if tag == "" || tag == "-" {
			continue
		}
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			out = append(out, tag)
		}
	}
	return out
}

// rulesOnly is the rules without where they are in the file: a rule that
// moved down a line (a comment added above it) is the same rule.
func rulesOnly(rs []forwarding.RuleSpec) []forwarding.RuleSpec {
	out := slices.Clone(rs)
	for i := range out {
		out[i].Line, out[i].File = 0, ""
	}
	return out
}
