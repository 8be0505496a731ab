// What one wake-up costs on this machine: two tasks ping-pong a byte through two pipes,
// so every hop blocks one task and wakes the other. Same CPU: the wake-up is a local
// context switch. Different CPUs: it is an IPI to a CPU that is usually idle, and the
// wake-up waits for that CPU to leave its idle state (on a VM, for the host to run the
// halted vCPU again). The kernel backend's agent and hand-offs wake threads on other
// CPUs, so this is the unit its overhead is made of (docs/runtime.md, "Measured").
// Holding /dev/cpu_dma_latency at 0 keeps idle CPUs polling instead of halting (a
// polling CPU notices the wake-up without an IPI). With a busy target CPU (a SCHED_IDLE
// spinner on each CPU, both tasks SCHED_FIFO so they preempt the spinners at once, as a
// band job preempts lower work) the wake-up is a plain reschedule IPI.
//   gcc -O2 -o /tmp/wakeup benches/wakeup_cost.c -lpthread
//   /tmp/wakeup          # threads and processes, same CPU and across CPUs (idle target)
//   /tmp/wakeup poll     # the same while holding /dev/cpu_dma_latency at 0 (root)
//   /tmp/wakeup busy     # across CPUs to a busy CPU (root, for SCHED_FIFO)
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const long ROUNDS = 100000;
static int ping[2], pong[2], peer_cpu, peer_fifo;
static volatile int spinning;

static void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  sched_setaffinity(0, sizeof s, &s);
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void *spin(void *cpu) {
  pin((int)(intptr_t)cpu);
  struct sched_param none = {0};
  sched_setscheduler(0, SCHED_IDLE, &none);
  while (spinning) {
  }
  return NULL;
}

static void *peer(void *unused) {
  (void)unused;
  pin(peer_cpu);
  struct sched_param fifo = {10};
  if (peer_fifo && sched_setscheduler(0, SCHED_FIFO, &fifo)) {
    perror("SCHED_FIFO (root needed)");
    _exit(1);
  }
  char c;
  for (long i = 0; i < ROUNDS; i++) {
    if (read(ping[0], &c, 1) != 1 || write(pong[1], &c, 1) != 1) break;
  }
  return NULL;
}

// One round trip = two wake-ups; returns µs per wake-up (syscalls included).
static double measure(int processes, int cpu) {
  if (pipe(ping) || pipe(pong)) return -1;
  peer_cpu = cpu;
  pin(0);
  pthread_t th;
  pid_t pid = 0;
  if (processes) {
    if ((pid = fork()) == 0) {
      peer(NULL);
      _exit(0);
    }
  } else {
    pthread_create(&th, NULL, peer, NULL);
  }
  char c = 'x';
  double t0 = now_us();
  for (long i = 0; i < ROUNDS; i++) {
    if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1) break;
  }
  double per_wakeup = (now_us() - t0) / ROUNDS / 2;
  if (processes) waitpid(pid, NULL, 0); else pthread_join(th, NULL);
  close(ping[0]); close(ping[1]); close(pong[0]); close(pong[1]);
  return per_wakeup;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "busy") == 0) {
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
      printf("one CPU online: no other CPU to wake a task on\n");
      return 0;
    }
    pthread_t spinners[2];
    spinning = 1;
    for (intptr_t cpu = 0; cpu < 2; cpu++) pthread_create(&spinners[cpu], NULL, spin, (void *)cpu);
    peer_fifo = 1;
    struct sched_param fifo = {10};
    if (sched_setscheduler(0, SCHED_FIFO, &fifo)) {
      perror("SCHED_FIFO (root needed)");
      return 1;
    }
    printf("threads   across CPUs, target busy: %6.2f us per wake-up\n", measure(0, 1));
    printf("processes across CPUs, target busy: %6.2f us per wake-up\n", measure(1, 1));
    spinning = 0;
    for (int cpu = 0; cpu < 2; cpu++) pthread_join(spinners[cpu], NULL);
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "poll") == 0) {
    // Kept open for the whole run: the kernel drops the request when the fd closes.
    int fd = open("/dev/cpu_dma_latency", O_WRONLY);
    int32_t zero = 0;
    if (fd < 0 || write(fd, &zero, sizeof zero) != sizeof zero) {
      perror("/dev/cpu_dma_latency (root needed)");
      return 1;
    }
    printf("holding /dev/cpu_dma_latency at 0 (idle CPUs poll)\n");
  }
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
    printf("one CPU online: only the same-CPU case can run\n");
  }
  for (int processes = 0; processes <= 1; processes++) {
    const char *kind = processes ? "processes" : "threads  ";
    printf("%s same CPU:    %6.2f us per wake-up\n", kind, measure(processes, 0));
    if (sysconf(_SC_NPROCESSORS_ONLN) >= 2)
      printf("%s across CPUs: %6.2f us per wake-up\n", kind, measure(processes, 1));
  }
  return 0;
}
