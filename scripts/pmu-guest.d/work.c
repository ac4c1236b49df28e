/* Workloads of known size for scripts/pmu-guest's suite, built static for
 * the guest (aarch64-linux-gnu-gcc -static). Each prints nothing and exits 0.
 *
 *   cgperf-work loop N              N iterations of a 4-instruction loop
 *   cgperf-work getppid N           N getppid() system calls
 *   cgperf-work hop A B MOVES N     writes itself into cgroup directory A,
 *                                   B, A, ... MOVES times, running N/MOVES
 *                                   loop iterations after each move
 *   cgperf-work join CG CPU N       writes itself into cgroup directory CG
 *                                   on the CPU it starts on, then runs
 *                                   pinned to CPU: N loop iterations
 *   cgperf-work wait PATH N         waits (10 ms polls) until PATH exists,
 *                                   then runs N loop iterations
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void loop(unsigned long n)
{
	unsigned long x = 0;
	for (unsigned long i = 0; i < n; i++)
		__asm__ volatile("add %0, %0, %1" : "+r"(x) : "r"(i));
}

static void join(const char *cgroup)
{
	char path[4096], pid[32];
	snprintf(path, sizeof path, "%s/cgroup.procs", cgroup);
	int fd = open(path, O_WRONLY);
	int len = snprintf(pid, sizeof pid, "%d", (int)getpid());
	if (fd < 0 || write(fd, pid, len) != len) {
		perror(path);
		exit(1);
	}
	close(fd);
}

static unsigned long num(const char *s)
{
	return strtoul(s, 0, 0);
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "loop")) {
		loop(num(argv[2]));
	} else if (argc == 3 && !strcmp(argv[1], "getppid")) {
		for (unsigned long i = num(argv[2]); i > 0; i--)
			syscall(SYS_getppid);
	} else if (argc == 6 && !strcmp(argv[1], "hop")) {
		unsigned long moves = num(argv[4]), n = num(argv[5]);
		for (unsigned long m = 0; m < moves; m++) {
			join(m % 2 ? argv[3] : argv[2]);
			loop(n / moves);
		}
	} else if (argc == 5 && !strcmp(argv[1], "join")) {
		cpu_set_t set;
		join(argv[2]);
		CPU_ZERO(&set);
		CPU_SET(atoi(argv[3]), &set);
		if (sched_setaffinity(0, sizeof set, &set)) {
			perror("sched_setaffinity");
			return 1;
		}
		loop(num(argv[4]));
	} else if (argc == 4 && !strcmp(argv[1], "wait")) {
		struct timespec tick = { 0, 10 * 1000 * 1000 };
		while (access(argv[2], F_OK))
			nanosleep(&tick, 0);
		loop(num(argv[3]));
	} else {
		fprintf(stderr, "usage: cgperf-work loop N | getppid N | hop A B MOVES N | join CG CPU N | wait PATH N\n");
		return 2;
	}
	return 0;
}
