// Shows the Linux fair server (6.12+) pausing a SCHED_FIFO thread: a FIFO spinner on
// CPU 0, optionally beside a SCHED_IDLE spinner; prints the longest gap in the FIFO
// thread's clock readings. Any runnable fair-class task on CPU 0 (the SCHED_IDLE one, or
// background work) gets ~50 ms per second at deadline priority, in one stretch.
// Root needed.  gcc -O2 -o /tmp/fsgap benches/fair_server_gap.c -lpthread
//               /tmp/fsgap 3 0; /tmp/fsgap 3 1      # seconds, with a SCHED_IDLE spinner?
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static double tcpu(){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static volatile int stop=0; static double idle_cpu=0;
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
void* idle(void*a){pin(0);struct sched_param p={0};sched_setscheduler(0,SCHED_IDLE,&p);while(!stop){} idle_cpu=tcpu();return 0;}
int main(int argc,char**argv){
  double dur=atof(argv[1]); int with_idle=atoi(argv[2]);
  pin(0); pthread_t th; if(with_idle) pthread_create(&th,0,idle,0); usleep(10000);
  struct sched_param p={10}; if(sched_setscheduler(0,SCHED_FIFO,&p)){perror("fifo");return 1;}
  double t0=now(),last=t0,maxgap=0; int gaps=0; double gapsum=0;
  while(now()-t0<dur){double t=now(); double g=t-last; if(g>maxgap)maxgap=g; if(g>0.001){gaps++;gapsum+=g;} last=t;}
  p.sched_priority=0; sched_setscheduler(0,SCHED_OTHER,&p); stop=1; if(with_idle) pthread_join(th,0);
  printf("idle=%d dur=%.1fs fifo maxgap=%.1fms gaps>1ms=%d total=%.1fms idle_thread_cpu=%.1fms\n",with_idle,dur,maxgap*1e3,gaps,gapsum*1e3,idle_cpu*1e3);
}
