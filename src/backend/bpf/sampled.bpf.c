// SPDX-License-Identifier: GPL-2.0
//
// cgperf's `by:` counting program: counts each hit of a `by:` tracepoint
// under the values of its fields, for the cgroup the hit happens in and
// every monitored ancestor of it (a cgroup's counts include its
// descendants, as in cgroup mode), in a hash map cgperf reads at each
// collection. No ring buffer: nothing to overflow, nothing lost.
//
// One program is attached to each `by:` tracepoint (one perf event each,
// whatever the number of CPUs and cgroups); the attachment's cookie says
// which tracepoint it is, since the record's common fields are overwritten
// by the kernel for BPF (its first 8 bytes hold a pt_regs pointer). The
// record's other fields sit at the offsets tracefs gives.
//
// Entries (a `by:` tracepoint as a config entry counts it: its fields, its
// compiled filter, its max_series) live in `entries`; which entries each
// attachment counts, in `attached`, under one of two generations: cgperf
// fills the idle one, then switches `settings.table` in one aligned store,
// so that a run sees either the old set or the new, never a mix.
//
// A reload that moves an entry between this program and perf ring buffers
// (its filter becomes one the program cannot evaluate, or the reverse)
// cuts both sides at one point per CPU, so that each hit is counted by
// exactly one: cgperf publishes the entry arriving here as counting only
// after the cut and the one leaving as counting only before it, then sets
// `settings.cut` to a time T (CLOCK_MONOTONIC, the clock of
// bpf_ktime_get_ns and of the rings' sample times). The first hit of a
// tracepoint on a CPU that finds its time at or past T records that time
// in `firsts`: every hit before it on that CPU is before the cut, it and
// every one after are past it. The rings count a sample on their side of
// that recorded time: a hit's sample is written after its run here, and
// before the next hit's run on that CPU.
//
// Rebuilt by build.sh beside it; tests/bpf_by.rs checks that the committed
// object is what this source compiles to.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

// Entries counted at once (both generations together).
#define MAX_ENTRIES 64
// Entries of one tracepoint.
#define TP_ENTRIES 8
// `by:` fields of an entry.
#define MAX_FIELDS 4
// Words of field values in a key.
#define KEY_WORDS 4
// Bytes of one field at most (a `char[24]`).
#define FIELD_BYTES 24
// Steps of a compiled filter.
#define MAX_RULES 16
// Levels of the cgroup hierarchy walked at most.
#define MAX_LEVELS 64
// Monitored ancestors counted at most per hit.
#define MAX_CHARGED 16

// Filter steps: comparisons push their result, AND and OR pop two and push
// one; the filter passes when the last value is true.
enum op {
	OP_EQ = 1,
	OP_NE,
	OP_LT,
	OP_LE,
	OP_GT,
	OP_GE,
	OP_BAND,
	OP_AND,
	OP_OR,
};

struct field {
	__u32 offset;
	__u16 size;
	// The first word of the key it goes to.
	__u16 word;
};

struct rule {
	__u32 offset;
	__u8 size;
	__u8 is_signed;
	__u8 op;
	__u8 unused;
	__u64 value;
};

// When an entry counts, with respect to `settings.cut`.
enum window {
	ALWAYS = 0,
	// Hits past the cut only (none while no cut is set).
	FROM_CUT,
	// Hits before the cut only (all while no cut is set).
	UNTIL_CUT,
};

struct entry {
	__u32 nfields;
	__u32 nrules;
	__u64 max_series;
	// An enum window.
	__u64 window;
	// The index of the hashes it counts in (see `counts`).
	__u64 home;
	struct field fields[MAX_FIELDS];
	struct rule rules[MAX_RULES];
};

struct settings {
	// The generation of `attached` in force (its low bit).
	__u64 table;
	// Bumped by cgperf after each change of `watched`: cached chains of
	// an older one are stale.
	__u64 watch;
	// The cut of a reload moving entries in or out (see the top), or 0.
	__u64 cut;
};

struct attached {
	__u32 n;
	__u32 entries[TP_ENTRIES];
};

struct key {
	__u32 slot;
	__u32 entry;
	__u64 words[KEY_WORDS];
};

// Per (cgroup slot, entry) counted there.
struct cell {
	// Value combinations with a series (at most max_series).
	__u64 series;
	// Hits beyond them.
	__u64 other;
	// Hits the map refused (it was full): lost, and said so.
	__u64 refused;
};

// The monitored ancestors of the cgroup that ran last on this CPU.
struct chain {
	__u64 id;
	__u64 watch;
	__u32 n;
	__u32 slots[MAX_CHARGED];
};

// Per CPU, at a cookie: the time of the first hit at or past the cut.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_ENTRIES);
	__type(key, __u32);
	__type(value, __u64);
} firsts SEC(".maps");

// Sized by cgperf at load time (the max_entries here are placeholders).

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct settings);
} settings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_ENTRIES);
	__type(key, __u32);
	__type(value, struct entry);
} entries SEC(".maps");

// At cookie * 2 + generation: the entries that attachment counts (an
// array: its lookups cost no hashing).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * MAX_ENTRIES);
	__type(key, __u32);
	__type(value, struct attached);
} attached SEC(".maps");

// Monitored cgroups: cgroup id -> slot (looked up only when a CPU's
// cached chain is stale, so allocated as used).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, __u32);
} watched SEC(".maps");

// Each entry counts at its `home` index: in one hash of cells (`cells`),
// the one decider of the places among its max_series, and in a chain of
// up to SPILLS hashes of keys (`counts`, at home * SPILLS + position),
// created by cgperf with the entry (before any table names it) and dropped
// once no entry counts there (no run can still reach them). The first is
// sized for what the entry can hold in every cgroup; a reload that raises
// its max_series past that room adds a spill hash to the end of the chain,
// twice the size of the last one, before any table names the raised entry.
// No hash is ever outgrown, copied or swapped under a run.
//
// An entry changed under the same series (a new filter or max_series is a
// new entry, at an index no run still counts the old one at) keeps the
// home of the one it replaces: runs of both, which overlap for an instant
// at the switch, decide each new value against the same cell and look it
// up in the same chain, so that it is a series or `other`, never both
// (see count()).

// slot -> what that cgroup counts of the entry; absent when it does not
// count it.
struct cells_of {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	// By sizes: the BTF of a map's maps has only declarations of their
	// structs, which the loader takes for an error, and the kernel takes
	// a key and value with BTF types both or neither.
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct cell));
};

// At a home: its cells.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, MAX_ENTRIES);
	__type(key, __u32);
	__array(values, struct cells_of);
} cells SEC(".maps");

// (slot, home, field values) -> hits.
struct keys_of {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	// By sizes, as above.
	__uint(key_size, sizeof(struct key));
	__uint(value_size, sizeof(__u64));
};

// Keys hashes a home's chain holds at most.
#define SPILLS 4

// At home * SPILLS + position: the keys hashes of a home's chain, from its
// first on, without gaps.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, MAX_ENTRIES * SPILLS);
	__type(key, __u32);
	__array(values, struct keys_of);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct chain);
} chains SEC(".maps");

// The field of `size` bytes (at most 8) at `offset` of the record, sign
// extended if `is_signed`.
static __always_inline __u64 read_int(void *ctx, __u32 offset, __u32 size, __u8 is_signed)
{
	__u64 v = 0;
	if (size == 0 || size > 8)
		return 0;
	bpf_probe_read_kernel(&v, size, ctx + offset);
	if (is_signed && size < 8) {
		__u32 shift = 64 - size * 8;
		v = (__u64)(((__s64)(v << shift)) >> shift);
	}
	return v;
}

static __always_inline int compare(const struct rule *r, __u64 v)
{
	__u64 c = r->value;
	switch (r->op) {
	case OP_EQ:
		return v == c;
	case OP_NE:
		return v != c;
	case OP_BAND:
		return (v & c) != 0;
	}
	if (r->is_signed) {
		__s64 a = v, b = c;
		switch (r->op) {
		case OP_LT: return a < b;
		case OP_LE: return a <= b;
		case OP_GT: return a > b;
		case OP_GE: return a >= b;
		}
	} else {
		switch (r->op) {
		case OP_LT: return v < c;
		case OP_LE: return v <= c;
		case OP_GT: return v > c;
		case OP_GE: return v >= c;
		}
	}
	return 0;
}

struct eval {
	void *ctx;
	const struct entry *e;
	// A stack of results, one bit each, `depth` deep.
	__u32 stack;
	__u32 depth;
	__u32 broken;
};

// One step of a filter (a bpf_loop callback: verified once, whatever the
// number of steps).
static long step(__u32 i, struct eval *x)
{
	if (i >= MAX_RULES)
		return 1;
	const struct rule *r = &x->e->rules[i];
	if (r->op == OP_AND || r->op == OP_OR) {
		if (x->depth < 2) {
			x->broken = 1;
			return 1;
		}
		__u32 a = x->stack & 1, b = (x->stack >> 1) & 1;
		__u32 rest = x->stack >> 2;
		x->stack = rest << 1 | (r->op == OP_AND ? (a & b) : (a | b));
		x->depth--;
		return 0;
	}
	if (x->depth >= 31) {
		x->broken = 1;
		return 1;
	}
	__u64 v = read_int(x->ctx, r->offset, r->size, r->is_signed);
	x->stack = x->stack << 1 | compare(r, v);
	x->depth++;
	return 0;
}

// Whether the hit passes the entry's filter (no rules: every hit does).
static __always_inline int passes(void *ctx, const struct entry *e)
{
	__u32 n = e->nrules;
	if (n == 0)
		return 1;
	struct eval x = {.ctx = ctx, .e = e};
	bpf_loop(n < MAX_RULES ? n : MAX_RULES, step, &x, 0);
	return !x.broken && x.depth == 1 && (x.stack & 1);
}

static __always_inline void set_word(struct key *k, __u32 i, __u64 v)
{
	switch (i) {
	case 0: k->words[0] = v; break;
	case 1: k->words[1] = v; break;
	case 2: k->words[2] = v; break;
	case 3: k->words[3] = v; break;
	}
}

// The entry's field values of this hit, into `k`.
static __always_inline void read_fields(void *ctx, const struct entry *e, struct key *k)
{
	for (__u32 i = 0; i < MAX_FIELDS; i++) {
		if (i >= e->nfields)
			break;
		__u32 size = e->fields[i].size;
		__u32 word = e->fields[i].word;
		__u64 tmp[FIELD_BYTES / 8] = {};
		if (size == 0 || size > FIELD_BYTES)
			continue;
		bpf_probe_read_kernel(tmp, size, ctx + e->fields[i].offset);
		for (__u32 j = 0; j < FIELD_BYTES / 8; j++)
			if (j * 8 < size)
				set_word(k, word + j, tmp[j]);
	}
}

// The two high bits of a key's value: its hits are the rest. A key is
// created UNDECIDED by the hit that first finds its values; that hit then
// takes a place among the cell's max_series (clearing UNDECIDED), or finds
// none left and makes it OTHER (hits of values past max_series, which
// cgperf counts under `other`). Hits of the same values on other CPUs
// meanwhile add to it, whatever it becomes: a value is either a series or
// `other`, never both.
#define UNDECIDED (1ULL << 63)
#define OTHER (1ULL << 62)

// The keys hash at `position` of `home`'s chain, or NULL past its end.
static __always_inline void *keys_at(__u32 home, __u32 position)
{
	__u32 at = home * SPILLS + position;
	return bpf_map_lookup_elem(&counts, &at);
}

// The hits of the key `k` in `home`'s chain, or NULL: the first copy
// found (a value has one key in the chain but in a rare race cgperf makes
// harmless: see `InKernel::collect`).
static __always_inline __u64 *find(__u32 home, struct key *k)
{
	for (__u32 i = 0; i < SPILLS; i++) {
		void *keys = keys_at(home, i);
		if (!keys)
			return NULL;
		__u64 *hits = bpf_map_lookup_elem(keys, k);
		if (hits)
			return hits;
	}
	return NULL;
}

// Counts the hit keyed `k` (its slot and entry set) in `home`'s chain, if
// that cgroup counts that entry (has a cell in its entry's `cells`): its
// key is found at once when it has one already.
//
// `series` counts the keys that took a place, plus, for an instant, those
// that found none (each takes one back at once): it reaches max_series
// only once max_series keys took a place, and never goes below after, so a
// hit that finds it there goes to `other` without a key.
//
// Every run, whatever the definition of the entry it counts, takes the
// same steps against the same cell and chain: look the key up in each
// hash; if absent, read the cell; if full, look it up in each hash again,
// else create it in the first hash that takes it, then take a place.
static __always_inline void count(__u32 home, void *cells, struct key *k, __u64 max_series)
{
	__u64 *hits = find(home, k);
	if (hits) {
		__sync_fetch_and_add(hits, 1);
		return;
	}
	struct cell *cell = bpf_map_lookup_elem(cells, &k->slot);
	if (!cell)
		return;
	// Read by an atomic addition of nothing: a full barrier before the
	// lookups below.
	if (__sync_fetch_and_add(&cell->series, 0) >= max_series) {
		// Full (max_series keys took a place). The first hit of the same
		// values on another CPU may have created their key, in any hash
		// of the chain, and taken the last place since the lookups above:
		// then this read saw that place taken, and the lookups after it
		// find their key, which this hit adds to, as it would have had it
		// come a moment later.
		hits = find(home, k);
		if (hits)
			__sync_fetch_and_add(hits, 1);
		else
			__sync_fetch_and_add(&cell->other, 1);
		return;
	}
	__u64 first = UNDECIDED | 1;
	for (__u32 i = 0; i < SPILLS; i++) {
		void *keys = keys_at(home, i);
		if (!keys)
			break;
		long err = bpf_map_update_elem(keys, k, &first, BPF_NOEXIST);
		hits = bpf_map_lookup_elem(keys, k);
		if (err != 0) {
			// Created on another CPU meanwhile: counted there; or this
			// hash is full: the next one.
			if (hits) {
				__sync_fetch_and_add(hits, 1);
				return;
			}
			continue;
		}
		// Created here (and gone only if cgperf dropped the cell
		// meanwhile).
		if (!hits)
			return;
		if (__sync_fetch_and_add(&cell->series, 1) < max_series) {
			// Adding the top bit clears it.
			__sync_fetch_and_add(hits, UNDECIDED);
			return;
		}
		__sync_fetch_and_add(&cell->series, -1);
		__sync_fetch_and_add(hits, UNDECIDED | OTHER);
		return;
	}
	// Every hash of the chain is full.
	__sync_fetch_and_add(&cell->refused, 1);
}

struct walk {
	__u32 n;
	__u32 slots[MAX_CHARGED];
};

static long walk_level(__u32 level, struct walk *w)
{
	__u64 id = bpf_get_current_ancestor_cgroup_id(level);
	if (!id)
		return 1;
	__u32 *slot = bpf_map_lookup_elem(&watched, &id);
	if (!slot)
		return 0;
	__u32 n = w->n;
	if (n >= MAX_CHARGED)
		return 1;
	w->slots[n] = *slot;
	w->n = n + 1;
	return 0;
}

SEC("tracepoint")
int by_fields(void *ctx)
{
	__u32 zero = 0;
	struct settings *s = bpf_map_lookup_elem(&settings, &zero);
	if (!s)
		return 1;
	__u64 table = *(volatile __u64 *)&s->table;
	__u64 watch = *(volatile __u64 *)&s->watch;
	__u64 cut = *(volatile __u64 *)&s->cut;
	__u32 cookie = (__u32)bpf_get_attach_cookie(ctx);
	__u32 at = cookie * 2 + (table & 1);
	// Whether this hit is past the cut; the first such on this CPU says
	// when, before anything can return (see the top).
	int past = 0;
	if (cut) {
		__u64 now = bpf_ktime_get_ns();
		if (now >= cut) {
			past = 1;
			__u64 *first = bpf_map_lookup_elem(&firsts, &cookie);
			if (first && *first < cut)
				*first = now;
		}
	}
	struct attached *a = bpf_map_lookup_elem(&attached, &at);
	if (!a || a->n == 0)
		return 1;
	__u64 id = bpf_get_current_cgroup_id();
	struct chain *c = bpf_map_lookup_elem(&chains, &zero);
	if (!c)
		return 1;
	if (c->id != id || c->watch != watch) {
		struct walk w = {};
		bpf_loop(MAX_LEVELS, walk_level, &w, 0);
		c->id = id;
		c->watch = watch;
		c->n = w.n;
		for (__u32 i = 0; i < MAX_CHARGED; i++)
			c->slots[i] = w.slots[i];
	}
	__u32 charged = c->n;
	if (charged == 0)
		return 1;
	for (__u32 i = 0; i < TP_ENTRIES; i++) {
		if (i >= a->n)
			break;
		__u32 index = a->entries[i];
		struct entry *e = bpf_map_lookup_elem(&entries, &index);
		if (!e)
			continue;
		if ((e->window == FROM_CUT && !past) || (e->window == UNTIL_CUT && past))
			continue;
		if (!passes(ctx, e))
			continue;
		__u32 home = (__u32)e->home;
		void *mine = bpf_map_lookup_elem(&cells, &home);
		if (!mine)
			continue;
		struct key k = {.entry = home};
		read_fields(ctx, e, &k);
		for (__u32 j = 0; j < MAX_CHARGED; j++) {
			if (j >= charged)
				break;
			k.slot = c->slots[j];
			count(home, mine, &k, e->max_series);
		}
	}
	// Not 0: that would keep the hit from every perf event of the
	// tracepoint (the rings, counted tracepoints, other tools).
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
