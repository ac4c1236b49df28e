// SPDX-License-Identifier: GPL-2.0
//
// cgperf's BPF counting program: charges what the system-wide counters of
// each CPU counted to the cgroup that was running there, and to every
// monitored ancestor of it, so that a cgroup's counts include its
// descendants as in cgroup mode.
//
// Each CPU records the cgroup of the task it switched to (`running`): at
// the next switch, what the counters counted since is charged to that
// cgroup, and the task switched in is recorded. A switch between two tasks
// of the same cgroup charges nothing yet (no counter is read): the counts
// go on accruing for that cgroup. A task that moves itself into another
// cgroup (`cgroup:cgroup_attach_task`, in the mover's context) has what it
// counted so far charged to the cgroup it leaves. To flush the interval in
// progress, cgperf test-runs `charge` on a CPU (BPF_PROG_TEST_RUN with
// BPF_F_TEST_RUN_ON_CPU, no task given): it charges the recorded cgroup.
// Every run has interrupts or preemption off, so on one CPU no two runs
// overlap: each CPU owns its entries of `last`, `running`, `chains` and
// `totals`, and plain additions suffice.
//
// What each monitored cgroup was charged lives in `totals`, in memory
// cgperf adds as it is needed (see there), never moved: a cgroup counted
// keeps its cells for as long as it is counted.
//
// Counters sit at stable indices (at most MAX_EVENTS per CPU), so that
// cgperf changes the counted groups without reloading the program: per
// CPU, `state` says which indices are read (live), which were just
// installed (fresh: their first reading is a baseline, not charged) and
// which go (retire: read and charged one last time, then no longer live).
// A run that sees fresh or retire bits does the whole change at once, so a
// group replaced by another on one CPU counts every moment exactly once.
//
// It reads the cgroup of a task through BTF (CO-RE), so it needs the
// kernel's BTF; helpers need Linux 5.17 (bpf_loop).
//
// Rebuilt by build.sh beside it; tests/bpf.rs checks that the committed
// object is what this source compiles to.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

// Counters per CPU at most: one perf event array each (a loader caps a
// perf event array at one entry per CPU), and the stride of `last`.
#define MAX_EVENTS 16
// Chunks per counter at most: enough for 2^32 slots.
#define CHUNKS 32
// Monitored ancestors a recorded chain holds at most; a cgroup with more
// is walked at every charge.
#define CACHED_SLOTS 8
// Chains cached per CPU (a power of two), at their cgroup id modulo this.
#define CHAINS 64
// Levels of the cgroup hierarchy walked at most: bpf_loop's own bound.
#define MAX_LEVELS (1 << 23)

// The kernel structures read, as much of them as is used: the loader
// relocates each field to where the running kernel has it.
struct kernfs_node {
	__u64 id;
} __attribute__((preserve_access_index));

struct cgroup {
	struct kernfs_node *kn;
	int level;
	struct cgroup *ancestors[];
} __attribute__((preserve_access_index));

// Linux 5.17 to 6.0 kept the ancestors' ids rather than the ancestors.
struct cgroup___ids {
	int level;
	__u64 ancestor_ids[];
} __attribute__((preserve_access_index));

struct css_set {
	struct cgroup *dfl_cgrp;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	struct css_set *cgroups;
} __attribute__((preserve_access_index));

struct config {
	__u32 capacity;
	__u32 cpus;
	// Bumped by cgperf after each change of `monitored`: a chain of an
	// older generation is stale.
	__u64 generation;
	// Slots in the first chunk of `totals`, as a shift.
	__u32 chunk0;
	__u32 unused;
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

// The slots of a cgroup's monitored ancestors (itself included), found at
// the generation `generation`.
struct chain {
	__u64 id;
	// Its `struct cgroup`, to walk it again.
	__u64 cgroup;
	__u64 generation;
	// Slots below; more than CACHED_SLOTS: too many to keep.
	__u32 n;
	__u32 slots[CACHED_SLOTS];
	__u32 unused;
};

// What the counters of a CPU read when a task there moved itself to
// another cgroup, taken by `moved` and used by the next run of `charge`
// there: what was counted before goes to the cgroup left, what after to
// the one entered. `moved` may be preempted (tracepoints run preemptible
// on some kernels), so it writes nothing else, and its reading counts only
// if no run read the counters since it began: `at` is `runs` then.
struct split {
	// Runs of `charge` on this CPU that read the counters (its own
	// count, written by it alone).
	__u64 runs;
	__u64 at;
	// The task that moved (0: none).
	__u64 task;
	// Bit e set: counter e was read.
	__u32 ok;
	__u32 unused;
	struct reading values[MAX_EVENTS];
};

// Sized by cgperf at load time (the max_entries here are placeholders).

// config[0]: `struct config`.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} config SEC(".maps");

// Per CPU: bits 0-15 live counters, 16-31 fresh, 32-47 retiring, 48-63
// the counters that lead their group (only a leader's times enabled and
// running are read: a group's members share them). cgperf writes it
// through mmap; a run clears fresh and retire bits by compare-and-swap,
// so that a change cgperf makes meanwhile is never lost.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} state SEC(".maps");

#define LIVE(s) ((__u32)(s) & 0xffff)
#define FRESH(s) ((__u32)((s) >> 16) & 0xffff)
#define RETIRE(s) ((__u32)((s) >> 32) & 0xffff)
#define LEADERS(s) ((__u32)((s) >> 48) & 0xffff)

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

// The monitored cgroups: cgroup id -> slot, in a hash sized by cgperf for
// the cgroups it counts (its size varies: cgperf replaces it by one twice
// as big when it is full, and drops the old one once every CPU has ended
// the runs that may still look it up).
struct ids {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u64);
	__type(value, __u32);
};

// monitored[0]: the hash of monitored cgroups in use.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct ids);
} monitored SEC(".maps");

// The cgroup recorded as running on CPU c (id 0: none yet), at c.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct chain);
} running SEC(".maps");

// The reading of CPU c taken at a move, at c.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct split);
} splits SEC(".maps");

// Chains cached by CPU c for cgroup id i at c * CHAINS + i % CHAINS: a
// switch into a cgroup seen lately costs no walk (a read and a hash
// lookup per level) but one array lookup.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct chain);
} chains SEC(".maps");

// A chunk of `totals`: what slots of one chunk were charged for one
// counter, slot by slot, CPU by CPU: at offset * cpus + c for the slot at
// `offset` in the chunk. cgperf creates each chunk (its size varies,
// hence BPF_F_INNER_MAP) and reads it through mmap.
struct chunk {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE | BPF_F_INNER_MAP);
	__type(key, __u32);
	__type(value, struct reading);
};

// What each slot was charged for counter e: chunk k of counter e at
// e * CHUNKS + k. Chunk 0 holds the first 1 << chunk0 slots (`struct
// config`), and each next chunk twice as many as the one before: cgperf adds a chunk when it first counts
// a cgroup in a slot there, and a counter's chunks when it first places a
// counter at e. So the memory follows the cgroups and counters counted,
// and a chunk, once there, stays: nothing is ever moved or handed over.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, MAX_EVENTS * CHUNKS);
	__type(key, __u32);
	__array(values, struct chunk);
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

// The `last` entry of counter e of `cpu`, with no delta yet.
static __always_inline struct last *cleared(__u32 cpu, __u32 e)
{
	__u32 i = cpu * MAX_EVENTS + e;
	struct last *l = bpf_map_lookup_elem(&last, &i);
	if (l) {
		l->delta.value = 0;
		l->delta.enabled = 0;
		l->delta.running = 0;
	}
	return l;
}

// Makes `now` the last reading of `l`, with the delta since the one before
// (none if `baseline`: a fresh counter's first reading).
static __always_inline void advance(struct last *l, struct reading *now, int baseline)
{
	if (!baseline) {
		l->delta.value = now->value - l->seen.value;
		l->delta.enabled = now->enabled - l->seen.enabled;
		l->delta.running = now->running - l->seen.running;
	}
	l->seen = *now;
}

// Reads the live counters of `cpu` into their `last` entries: the delta
// since the last reading, none for a fresh counter (its first reading is a
// baseline) or one that cannot be read (none there, yet or any more).
__noinline int read_all(__u32 cpu, __u64 s)
{
	__u32 live = LIVE(s), fresh = FRESH(s), leaders = LEADERS(s);
	for (__u32 e = 0; e < MAX_EVENTS; e++) {
		struct last *l = cleared(cpu, e);
		if (!l || !(live & (1u << e)))
			continue;
		struct reading now = {};
		if (leaders & (1u << e)) {
			struct bpf_perf_event_value v;
			if (read_counter(e, &v))
				continue;
			now.value = v.counter;
			now.enabled = v.enabled;
			now.running = v.running;
		} else {
			now.value = read_value(e);
			if (now.value >= (__u64)-4095)
				continue;
		}
		advance(l, &now, fresh & (1u << e));
	}
	return 0;
}

// Makes the reading taken at a move the last reading of this CPU's live
// counters (not fresh ones: their first reading is a baseline), with the
// deltas up to it.
__noinline int read_split(__u32 cpu, __u64 s)
{
	struct split *sp = bpf_map_lookup_elem(&splits, &cpu);
	if (!sp)
		return 0;
	__u32 use = LIVE(s) & ~FRESH(s) & sp->ok;
	for (__u32 e = 0; e < MAX_EVENTS; e++) {
		struct last *l = cleared(cpu, e);
		if (!l || !(use & (1u << e)))
			continue;
		struct reading now = sp->values[e];
		advance(l, &now, 0);
	}
	return 0;
}

// The chunk of `totals` that holds `slot` when the first holds 1 << shift,
// and the slot's offset there.
static __always_inline __u32 chunk_of(__u32 slot, __u32 shift, __u32 *offset)
{
	// Chunk k holds the slots whose q is in [2^k, 2^(k+1)).
	__u32 q = (slot >> shift) + 1, k = 0;
	if (q >> 16) {
		q >>= 16;
		k += 16;
	}
	if (q >> 8) {
		q >>= 8;
		k += 8;
	}
	if (q >> 4) {
		q >>= 4;
		k += 4;
	}
	if (q >> 2) {
		q >>= 2;
		k += 2;
	}
	if (q >> 1)
		k += 1;
	*offset = slot - ((((__u32)1 << k) - 1) << shift);
	return k;
}

// Adds this CPU's deltas to `slot`.
__noinline int charge_slot(__u32 cpu, __u32 capacity, __u32 slot)
{
	__u32 zero = 0;
	struct config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg || slot >= capacity || cfg->chunk0 > 31)
		return 0;
	__u32 offset = 0;
	__u32 k = chunk_of(slot, cfg->chunk0, &offset);
	__u32 cell = offset * cfg->cpus + cpu;
	for (__u32 e = 0; e < MAX_EVENTS; e++) {
		__u32 from = cpu * MAX_EVENTS + e;
		struct last *l = bpf_map_lookup_elem(&last, &from);
		if (!l || !(l->delta.value | l->delta.enabled | l->delta.running))
			continue;
		__u32 at = e * CHUNKS + k;
		void *chunk = bpf_map_lookup_elem(&totals, &at);
		if (!chunk)
			continue;
		struct reading *t = bpf_map_lookup_elem(chunk, &cell);
		if (!t)
			continue;
		t->value += l->delta.value;
		t->enabled += l->delta.enabled;
		t->running += l->delta.running;
	}
	return 0;
}

struct walk {
	struct cgroup *cgroup;
	__u32 level;
	__u32 cpu;
	__u32 capacity;
	// Charge each monitored ancestor as it is found.
	__u32 charge;
	// Monitored ancestors met so far, the first CACHED_SLOTS of them.
	__u32 n;
	__u32 slots[CACHED_SLOTS];
};

// The id of `cgroup`'s ancestor at `level` (0: the root).
static __always_inline __u64 ancestor_id(struct cgroup *cgroup, __u32 level)
{
	__u64 id = 0;
	if (bpf_core_field_exists(cgroup->ancestors)) {
		struct cgroup *a = 0;
		void *at = (void *)cgroup + bpf_core_field_offset(cgroup->ancestors) +
			   (__u64)level * sizeof(a);
		if (bpf_probe_read_kernel(&a, sizeof(a), at) || !a)
			return 0;
		id = BPF_CORE_READ(a, kn, id);
	} else {
		struct cgroup___ids *old = (void *)cgroup;
		void *at = (void *)old + bpf_core_field_offset(old->ancestor_ids) +
			   (__u64)level * sizeof(id);
		if (bpf_probe_read_kernel(&id, sizeof(id), at))
			return 0;
	}
	return id;
}

// Notes (and charges, if asked) the ancestor at `level` if it is
// monitored; stops past the cgroup itself.
static long walk_level(__u32 level, struct walk *w)
{
	if (level > w->level)
		return 1;
	__u64 id = ancestor_id(w->cgroup, level);
	if (!id)
		return 0;
	__u32 zero = 0;
	void *ids = bpf_map_lookup_elem(&monitored, &zero);
	if (!ids)
		return 1;
	__u32 *slot = bpf_map_lookup_elem(ids, &id);
	if (!slot || *slot >= w->capacity)
		return 0;
	if (w->charge)
		charge_slot(w->cpu, w->capacity, *slot);
	__u32 n = w->n;
	if (n < CACHED_SLOTS)
		w->slots[n] = *slot;
	if (n <= CACHED_SLOTS)
		w->n = n + 1;
	return 0;
}

// Walks the ancestors of the cgroup recorded as running on `cpu` into its
// chain (charging them if `charge`).
__noinline int walk_chain(__u32 cpu, __u32 capacity, __u32 charge)
{
	struct chain *c = bpf_map_lookup_elem(&running, &cpu);
	if (!c)
		return 0;
	struct cgroup *cgroup = (struct cgroup *)c->cgroup;
	int level = 0;
	if (bpf_core_field_exists(cgroup->ancestors))
		level = BPF_CORE_READ(cgroup, level);
	else
		level = BPF_CORE_READ((struct cgroup___ids *)cgroup, level);
	struct walk w = {
		.cgroup = cgroup,
		.level = level < 0 ? 0 : level,
		.cpu = cpu,
		.capacity = capacity,
		.charge = charge,
	};
	bpf_loop(MAX_LEVELS, walk_level, &w, 0);
	c->n = w.n;
	for (__u32 i = 0; i < CACHED_SLOTS; i++)
		c->slots[i] = w.slots[i];
	return 0;
}

// Charges this CPU's deltas to every slot of the chain recorded as
// running on `cpu`.
__noinline int charge_chain(__u32 cpu, __u32 capacity)
{
	struct chain *c = bpf_map_lookup_elem(&running, &cpu);
	if (!c)
		return 0;
	if (c->n > CACHED_SLOTS)
		return walk_chain(cpu, capacity, 1);
	__u32 n = c->n;
	for (__u32 i = 0; i < CACHED_SLOTS && i < n; i++)
		charge_slot(cpu, capacity, c->slots[i]);
	return 0;
}

// Makes the chain recorded as running on `cpu` that of the cgroup it
// names (`id`, `cgroup`) at `generation`, from this CPU's cache or by a
// walk.
__noinline int record(__u32 cpu, __u32 capacity, __u64 generation)
{
	struct chain *r = bpf_map_lookup_elem(&running, &cpu);
	if (!r)
		return 0;
	__u64 id = r->id, cgroup = r->cgroup;
	__u32 at = cpu * CHAINS + (__u32)(id & (CHAINS - 1));
	struct chain *c = bpf_map_lookup_elem(&chains, &at);
	if (c && c->id == id && c->cgroup == cgroup && c->generation == generation) {
		*r = *c;
		return 0;
	}
	r->generation = generation;
	walk_chain(cpu, capacity, 0);
	if (c)
		*c = *r;
	return 0;
}

// The default cgroup of `task`, and its id.
static __always_inline __u64 cgroup_of(struct task_struct *task, __u64 *id)
{
	struct cgroup *cgroup = BPF_CORE_READ(task, cgroups, dfl_cgrp);
	*id = cgroup ? BPF_CORE_READ(cgroup, kn, id) : 0;
	return (__u64)cgroup;
}

// Makes `r` the chain of `cgroup` (id `id`) if it is not already.
static __always_inline void become(struct chain *r, __u64 cgroup, __u64 id, __u32 cpu,
				   __u32 capacity, __u64 generation)
{
	if (r->id == id && r->cgroup == cgroup && r->generation == generation)
		return;
	r->id = id;
	r->cgroup = cgroup;
	record(cpu, capacity, generation);
}

// Charges what this CPU counted since its last run to the cgroup of the
// task running (current), then records `next`'s cgroup (none: a flush).
// A switch between two tasks of the cgroup recorded reads nothing.
static __always_inline int run(struct task_struct *next)
{
	__u32 zero = 0;
	struct config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return 0;
	__u32 cpu = bpf_get_smp_processor_id();
	__u32 capacity = cfg->capacity;
	__u64 generation = cfg->generation;
	if (cpu >= cfg->cpus)
		return 0;
	__u64 *st = bpf_map_lookup_elem(&state, &cpu);
	struct chain *r = bpf_map_lookup_elem(&running, &cpu);
	struct split *sp = bpf_map_lookup_elem(&splits, &cpu);
	if (!st || !r || !sp)
		return 0;
	__u64 s = *(volatile __u64 *)st;
	struct task_struct *current = (struct task_struct *)bpf_get_current_task();
	__u64 id = 0, next_id = 0;
	__u64 cgroup = cgroup_of(current, &id);
	__u64 next_cgroup = next ? cgroup_of(next, &next_id) : 0;
	int split = sp->task == (__u64)current && sp->at == sp->runs;
	if (next && !split && !FRESH(s) && !RETIRE(s) && r->generation == generation &&
	    r->id == id && r->cgroup == cgroup && next_id == id && next_cgroup == cgroup)
		return 0;
	sp->runs++;
	sp->task = 0;
	if (split) {
		// Up to the move, for the cgroup recorded as running then.
		read_split(cpu, s);
		if (r->generation != generation)
			record(cpu, capacity, generation);
		if (r->id)
			charge_chain(cpu, capacity);
	}
	read_all(cpu, s);
	// The task's own cgroup, which it may have entered since its switch
	// in (a move `moved` could not record: charged all to the new one).
	if (id)
		become(r, cgroup, id, cpu, capacity, generation);
	if (r->id)
		charge_chain(cpu, capacity);
	if (FRESH(s) || RETIRE(s)) {
		__u64 done = (s & ~(0xffffffffull << 16)) & ~(__u64)RETIRE(s);
		__sync_val_compare_and_swap(st, s, done);
	}
	if (next_id)
		become(r, next_cgroup, next_id, cpu, capacity, generation);
	return 0;
}

// sched_switch(preempt, prev, next, ...): `next` is NULL in a test run.
SEC("raw_tracepoint/sched_switch")
int charge(struct bpf_raw_tracepoint_args *ctx)
{
	return run((struct task_struct *)ctx->args[2]);
}

// cgroup_attach_task(dst_cgrp, path, task, threadgroup), after the move:
// if the task running here moved itself, takes a reading of this CPU's
// counters, so that the next run of `charge` here gives what was counted
// before it to the cgroup left. (A task moved by another while it runs on
// another CPU has what it counted since its last switch charged to its
// new cgroup, as is one whose reading a run here overtook.)
SEC("raw_tracepoint/cgroup_attach_task")
int moved(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task = (struct task_struct *)ctx->args[2];
	struct task_struct *current = (struct task_struct *)bpf_get_current_task();
	if (!task)
		return 0;
	int tgid = BPF_CORE_READ(task, tgid);
	__u64 me = bpf_get_current_pid_tgid();
	if (task != current && !(ctx->args[3] && (__u32)(me >> 32) == (__u32)tgid))
		return 0;
	__u32 cpu = bpf_get_smp_processor_id();
	__u64 *st = bpf_map_lookup_elem(&state, &cpu);
	struct split *sp = bpf_map_lookup_elem(&splits, &cpu);
	if (!st || !sp)
		return 0;
	__u64 at = *(volatile __u64 *)&sp->runs;
	__u64 s = *(volatile __u64 *)st;
	__u32 live = LIVE(s), leaders = LEADERS(s), ok = 0;
	for (__u32 e = 0; e < MAX_EVENTS; e++) {
		if (!(live & (1u << e)))
			continue;
		struct reading *now = &sp->values[e];
		if (leaders & (1u << e)) {
			struct bpf_perf_event_value v;
			if (read_counter(e, &v))
				continue;
			now->value = v.counter;
			now->enabled = v.enabled;
			now->running = v.running;
		} else {
			__u64 v = read_value(e);
			if (v >= (__u64)-4095)
				continue;
			now->value = v;
			now->enabled = 0;
			now->running = 0;
		}
		ok |= 1u << e;
	}
	sp->ok = ok;
	sp->task = (__u64)current;
	asm volatile("" ::: "memory");
	*(volatile __u64 *)&sp->at = at;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
