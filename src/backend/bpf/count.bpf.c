// SPDX-License-Identifier: GPL-2.0
//
// cgperf's BPF counting program: charges what the system-wide counters of
// each CPU counted to the cgroup that was running there, and to every
// monitored ancestor of it, so that a cgroup's counts include its
// descendants as in cgroup mode.
//
// It runs at every sched_switch (the task switched out is still `current`)
// and, to flush the interval in progress, when cgperf test-runs it on a CPU
// (BPF_PROG_TEST_RUN with BPF_F_TEST_RUN_ON_CPU: `current` is whatever runs
// there). Both run with interrupts or preemption off, so on one CPU no two
// runs overlap: each CPU owns its entries of `last` and `totals`, and plain
// additions suffice.
//
// It reads no kernel structure (only helpers), so the object needs no BTF
// relocation and loads on any kernel that has the helpers (5.17: bpf_loop).
//
// Rebuilt by build.sh beside it; tests/bpf.rs checks that the committed
// object is what this source compiles to.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

// Counters per CPU at most: one perf event array each (a loader caps a
// perf event array at one entry per CPU), and the stride of `last`.
#define MAX_EVENTS 16
// Levels of the cgroup hierarchy walked at most: bpf_loop's own bound.
#define MAX_LEVELS (1 << 23)
// Monitored ancestors a cached chain holds at most; a cgroup with more is
// walked at every switch.
#define CACHED_SLOTS 8
// Chains cached per CPU (a power of two), at their cgroup id modulo this.
#define CHAINS 64

struct config {
	__u32 events;
	__u32 capacity;
	__u32 cpus;
	// Bit e set: counter e leads its group. Only a leader's times enabled
	// and running are used (a group's members share them), so the others
	// are read without them, which costs a clock read less each.
	__u32 leaders;
	// Bumped by cgperf after each change of `monitored`: a cached chain
	// of an older generation is stale.
	__u64 generation;
};

struct reading {
	__u64 value;
	__u64 enabled;
	__u64 running;
};

// The last reading of a counter, and what it counted since the one before.
struct last {
	struct reading seen;
	struct reading delta;
};

// The slots of a cgroup's monitored ancestors (itself included), found by
// a walk of its path at the generation `generation`.
struct chain {
	__u64 id;
	__u64 generation;
	// Slots below; more than CACHED_SLOTS: too many to cache.
	__u32 n;
	__u32 slots[CACHED_SLOTS];
	__u32 unused;
};

// Sized by cgperf at load time (the max_entries here are placeholders).

// config[0]: `struct config`.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} config SEC(".maps");

// counters<e>: counter e of each CPU, at the CPU's number.
#define COUNTERS(e)                                            \
	struct {                                               \
		__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);   \
		__uint(key_size, sizeof(__u32));               \
		__uint(value_size, sizeof(__u32));             \
	} counters##e SEC(".maps")
COUNTERS(0); COUNTERS(1); COUNTERS(2); COUNTERS(3);
COUNTERS(4); COUNTERS(5); COUNTERS(6); COUNTERS(7);
COUNTERS(8); COUNTERS(9); COUNTERS(10); COUNTERS(11);
COUNTERS(12); COUNTERS(13); COUNTERS(14); COUNTERS(15);

// The last reading of counter e of CPU c, at c * MAX_EVENTS + e.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct last);
} last SEC(".maps");

// The monitored cgroups: cgroup id -> slot.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u64);
	__type(value, __u32);
} monitored SEC(".maps");

// Chains cached by CPU c for cgroup id i at c * CHAINS + i % CHAINS: a
// switch out of a cgroup seen lately costs no walk (a helper call and a
// hash lookup per level) but one array lookup. Each CPU owns its entries.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct chain);
} chains SEC(".maps");

// What each slot was charged on each CPU, at
// (c * capacity + slot) * events + e; cgperf reads it through mmap.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct reading);
} totals SEC(".maps");

// Reads counter e of this CPU with its times enabled and running.
static __always_inline long read_counter(__u32 e, struct bpf_perf_event_value *v)
{
#define READ(n) \
	case n: \
		return bpf_perf_event_read_value(&counters##n, BPF_F_CURRENT_CPU, v, sizeof(*v))
	switch (e) {
	READ(0); READ(1); READ(2); READ(3); READ(4); READ(5); READ(6); READ(7);
	READ(8); READ(9); READ(10); READ(11); READ(12); READ(13); READ(14); READ(15);
	}
	return -1;
}

// Reads the value alone of counter e of this CPU: an errno, negated, on
// failure (no count comes near 2^64 - 4095).
static __always_inline __u64 read_value(__u32 e)
{
#define VALUE(n) \
	case n: \
		return bpf_perf_event_read(&counters##n, BPF_F_CURRENT_CPU)
	switch (e) {
	VALUE(0); VALUE(1); VALUE(2); VALUE(3); VALUE(4); VALUE(5); VALUE(6); VALUE(7);
	VALUE(8); VALUE(9); VALUE(10); VALUE(11); VALUE(12); VALUE(13); VALUE(14); VALUE(15);
	}
	return (__u64)-1;
}

struct walk {
	__u32 cpu;
	__u32 events;
	__u32 capacity;
	// Monitored ancestors met so far, the first CACHED_SLOTS of them.
	__u32 n;
	__u32 slots[CACHED_SLOTS];
};

// Adds this CPU's deltas to `slot`.
static __noinline int charge_slot(__u32 cpu, __u32 events, __u32 capacity, __u32 slot)
{
	if (slot >= capacity)
		return 0;
	__u32 base = (cpu * capacity + slot) * events;
	for (__u32 e = 0; e < MAX_EVENTS && e < events; e++) {
		__u32 from = cpu * MAX_EVENTS + e;
		__u32 to = base + e;
		struct last *l = bpf_map_lookup_elem(&last, &from);
		struct reading *t = bpf_map_lookup_elem(&totals, &to);
		if (!l || !t)
			continue;
		t->value += l->delta.value;
		t->enabled += l->delta.enabled;
		t->running += l->delta.running;
	}
	return 0;
}

// Charges the cgroup at `level` above the root on current's path, if it is
// monitored, and notes its slot; stops past current's own.
static long walk_level(__u32 level, struct walk *w)
{
	__u64 id = bpf_get_current_ancestor_cgroup_id(level);
	if (!id)
		return 1;
	__u32 *slot = bpf_map_lookup_elem(&monitored, &id);
	if (!slot || *slot >= w->capacity)
		return 0;
	charge_slot(w->cpu, w->events, w->capacity, *slot);
	__u32 n = w->n;
	if (n < CACHED_SLOTS)
		w->slots[n] = *slot;
	if (n <= CACHED_SLOTS)
		w->n = n + 1;
	return 0;
}

SEC("raw_tracepoint/sched_switch")
int charge(void *ctx)
{
	__u32 zero = 0;
	struct config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return 0;
	__u32 cpu = bpf_get_smp_processor_id();
	__u32 events = cfg->events;
	__u32 capacity = cfg->capacity;
	__u32 leaders = cfg->leaders;
	__u64 generation = cfg->generation;
	if (cpu >= cfg->cpus || events == 0 || events > MAX_EVENTS)
		return 0;
	for (__u32 e = 0; e < MAX_EVENTS && e < events; e++) {
		__u32 i = cpu * MAX_EVENTS + e;
		struct last *l = bpf_map_lookup_elem(&last, &i);
		if (!l)
			continue;
		if (leaders & (1u << e)) {
			struct bpf_perf_event_value v;
			if (read_counter(e, &v)) {
				// No counter there (yet, or any more): nothing to charge.
				l->delta.value = 0;
				l->delta.enabled = 0;
				l->delta.running = 0;
				continue;
			}
			l->delta.value = v.counter - l->seen.value;
			l->delta.enabled = v.enabled - l->seen.enabled;
			l->delta.running = v.running - l->seen.running;
			l->seen.value = v.counter;
			l->seen.enabled = v.enabled;
			l->seen.running = v.running;
		} else {
			__u64 v = read_value(e);
			if (v >= (__u64)-4095) {
				l->delta.value = 0;
				continue;
			}
			l->delta.value = v - l->seen.value;
			l->seen.value = v;
		}
	}
	__u64 id = bpf_get_current_cgroup_id();
	__u32 at = cpu * CHAINS + (__u32)(id & (CHAINS - 1));
	struct chain *c = bpf_map_lookup_elem(&chains, &at);
	if (c && c->id == id && c->generation == generation && c->n <= CACHED_SLOTS) {
		__u32 n = c->n;
		for (__u32 i = 0; i < CACHED_SLOTS && i < n; i++)
			charge_slot(cpu, events, capacity, c->slots[i]);
		return 0;
	}
	struct walk w = {
		.cpu = cpu,
		.events = events,
		.capacity = capacity,
	};
	bpf_loop(MAX_LEVELS, walk_level, &w, 0);
	if (c) {
		c->id = id;
		c->generation = generation;
		c->n = w.n;
		for (__u32 i = 0; i < CACHED_SLOTS; i++)
			c->slots[i] = w.slots[i];
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
