// ring-model: the simplest one-producer, one-consumer ring, to see what the two vCPUs'
// distance costs a shared-memory path, apart from everything spindle does besides.
//
//   gcc -O2 -pthread scripts/ring-model.c -o /tmp/ring-model
//   /tmp/ring-model SHAPE [STRIDE] [SLOTS] [BATCH]
//   env: EXTRA=n  n more stores a message by the producer, to a line only it touches
//        LOCKED=1 one locked compare-and-swap a message by the producer, on a word only
//                 it touches (as a claim is)
//
// The producer (pinned to CPU 0) writes two words of each slot (a ring of SLOTS slots,
// STRIDE bytes apart) and makes it visible; the consumer (CPU 1) reads one word of each.
// SHAPE says how the consumer learns of a message:
//   stamp    the slot's first word, stored last (as Aeron's frame length)
//   flags    a word per slot in an array apart from the slots (as the sender's
//            `published` entries that its node's predicate thread polls)
//   counter  a counter the producer raises every message, the consumer polls
//   batched  the same counter, raised every BATCH messages (as a `sent` push per pass)
// The consumer publishes its progress every 64 messages; the producer reads it only when
// the ring looks full. Prints one line: the shape and msgs/s.
// docs/benchmarks.md ("Two placements of the two vCPUs") has what it measured here.
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum shape { STAMP, FLAGS, COUNTER, BATCHED };
static const long N = 20000000;
static long slots = 14563, stride = 144, batch = 64;
static enum shape how = STAMP;
static char *ring;
static _Atomic long *flags;
static _Atomic long tail __attribute__((aligned(64)));
static _Atomic long head __attribute__((aligned(64)));
static _Atomic long claim __attribute__((aligned(64)));
static volatile long scratch[64] __attribute__((aligned(64)));

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static inline long *slot(long i) { return (long *)(ring + (i % slots) * stride); }

static void *consume(void *unused) {
    (void)unused;
    pin(1);
    long sum = 0, i = 0, told = 0;
    while (i < N) {
        if (how == STAMP) {
            while (atomic_load_explicit((_Atomic long *)slot(i), memory_order_acquire) != i + 1) {}
            sum += slot(i)[2];
            i++;
        } else if (how == FLAGS) {
            while (atomic_load_explicit(&flags[i % slots], memory_order_acquire) != i + 1) {}
            sum += slot(i)[2];
            i++;
        } else {
            long t;
            while ((t = atomic_load_explicit(&tail, memory_order_acquire)) <= i) {}
            for (; i < t; i++) sum += slot(i)[2];
        }
        if (i - told >= 64) {
            atomic_store_explicit(&head, i, memory_order_release);
            told = i;
        }
    }
    atomic_store_explicit(&head, i, memory_order_release);
    return (void *)sum;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: ring-model stamp|flags|counter|batched [STRIDE] [SLOTS] [BATCH]\n");
        return 2;
    }
    const char *names[] = {"stamp", "flags", "counter", "batched"};
    int found = 0;
    for (int k = 0; k < 4; k++)
        if (!strcmp(argv[1], names[k])) how = (enum shape)k, found = 1;
    if (!found) { fprintf(stderr, "unknown shape %s\n", argv[1]); return 2; }
    if (argc > 2) stride = atol(argv[2]);
    if (argc > 3) slots = atol(argv[3]);
    if (argc > 4) batch = atol(argv[4]);
    if (stride < 24 || stride % 8 || slots < 128 || batch < 1) { fprintf(stderr, "bad sizes\n"); return 2; }
    int extra = getenv("EXTRA") ? atoi(getenv("EXTRA")) : 0;
    if (extra < 0 || extra > 64) { fprintf(stderr, "EXTRA: 0..64\n"); return 2; }
    int locked = getenv("LOCKED") != NULL;
    flags = aligned_alloc(64, (slots * 8 + 63) / 64 * 64);
    ring = aligned_alloc(4096, (slots * stride + 4095) / 4096 * 4096);
    memset(flags, 0, slots * 8);
    memset(ring, 0, slots * stride);
    pthread_t t;
    pin(0);
    pthread_create(&t, 0, consume, 0);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    long seen = 0;
    for (long i = 0; i < N; i++) {
        if (i - seen >= slots - 64)
            while (i - (seen = atomic_load_explicit(&head, memory_order_acquire)) >= slots - 64) {}
        if (locked) {
            long c = atomic_load_explicit(&claim, memory_order_relaxed);
            atomic_compare_exchange_strong(&claim, &c, c + 1);
        }
        for (int k = 0; k < extra; k++) scratch[k] = i;
        long *s = slot(i);
        s[2] = i;
        s[1] = 128;
        if (how == STAMP) atomic_store_explicit((_Atomic long *)s, i + 1, memory_order_release);
        else if (how == FLAGS) atomic_store_explicit(&flags[i % slots], i + 1, memory_order_release);
        else if (how == COUNTER || (i + 1) % batch == 0 || i + 1 == N)
            atomic_store_explicit(&tail, i + 1, memory_order_release);
    }
    pthread_join(t, 0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double sec = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    if (how == BATCHED) printf("batched every %ld", batch);
    else printf("%s", names[how]);
    printf("%s extra %d: %.2f M msgs/s\n", locked ? " locked" : "", extra, N / sec / 1e6);
    return 0;
}
