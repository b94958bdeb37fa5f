/*
 * sclient: a tiny dependency-free RESP client for the snapscan benchmarks.
 *
 * The benchmark machine has 2 cores shared by the server, the load generator
 * and the scanners, so the scanners, probes and invalidation loops are written
 * in C: they must cost the machine as little CPU as possible, or the figures
 * would measure the Python client instead of the server.
 *
 *   sclient PORT ping   [--seconds S]
 *       PING round trips back to back until SIGTERM/SIGINT or S seconds.
 *       Prints JSON: count, max_us, p50_us, p99_us, p999_us, max_at_ms.
 *   sclient PORT loop   [--seconds S] -- CMD ARG... ("{}" stands for the cursor)
 *       full cursor iterations again and again until stopped.
 *       Prints JSON: iterations (completed), calls, items, errors.
 *   sclient PORT iter   [--repeat K] [--seconds S] -- CMD ARG...
 *       K full cursor iterations (default 1). JSON: iterations, calls, items, elapsed_us.
 *   sclient PORT repeat [--repeat K] [--seconds S] -- CMD ARG...
 *       sends CMD K times, one at a time, skipping the replies. JSON like iter,
 *       plus per-call latency: mean_us, p50_us, p90_us, p99_us, max_us.
 *   sclient PORT inval  --scan CMD --ids FILE [--max N] [--seconds S] [--nodel] [--dump FILE]
 *       for each id of FILE (one a line): full iteration of
 *       `CMD {} MATCH user:<id>:* COUNT 1000`, then one DEL of the keys found.
 *       JSON: n, calls, keys, errors, times_us (per invalidation, scan + DEL).
 *       --dump writes "<id> <key>" lines (sorted by the caller); --wrap starts the
 *       list again at its end (the users are then already gone: scans find nothing);
 *       --refill re-creates the deleted keys (MSET key x ...) after each DEL, as a
 *       cache refills, so that a long loop keeps a constant keyspace (not timed);
 *       --rate R paces the loop at R invalidations per second (default: back to back).
 *
 *   sclient PORT write --count N [--first F] [--range R] [--seed S] [--depth D] [--rate OPS]
 *                      [--seconds S] -- CMD ARG...
 *       sends N commands, pipelined D at a time (default 16: D commands, then their D
 *       replies). In every argument "{k}" stands for a 12-digit zero-padded number (as
 *       redis-benchmark's __rand_int__): for the i-th command (i in [F, F+N)) it is
 *       perm(i), a bijection of [0, R) (R default F+N) chosen by --seed S, or i itself
 *       with --seed 0 (i is taken modulo R: past R the sequence starts again).
 *       Distinct i < R give distinct keys, so every DEL / EXPIRE hits and
 *       every SET of new keys creates one, and equal seeds give every server the same
 *       sequence; several processes with disjoint [F, F+N) share one permutation.
 *       --rate paces the batches at OPS commands per second. JSON: n, elapsed_us, errors.
 *
 * Everything is bounded: --seconds defaults to 600, --max/--repeat to finite
 * values, and SIGTERM/SIGINT stop any mode cleanly (the JSON is still printed).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop_flag = 0;
static void on_signal(int s) { (void)s; stop_flag = 1; }

static int fd = -1;
static char *buf;
static size_t cap = 1 << 20, beg = 0, end = 0;
static long long errors = 0;
static char first_error[256] = "";

static uint64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + ts.tv_nsec / 1000;
}

static void die(const char *m) {
    fprintf(stderr, "sclient: %s (%s)\n", m, strerror(errno));
    exit(2);
}

/* Reads more bytes; returns 0 when stopped by a signal or EOF. */
static int fill(void) {
    if (beg > 0 && beg == end) beg = end = 0;
    if (end == cap) {
        if (beg > 0) {
            memmove(buf, buf + beg, end - beg);
            end -= beg;
            beg = 0;
        } else {
            cap *= 2;
            buf = realloc(buf, cap);
            if (!buf) die("out of memory");
        }
    }
    for (;;) {
        ssize_t n = read(fd, buf + end, cap - end);
        if (n > 0) {
            end += n;
            return 1;
        }
        if (n == 0) {
            fprintf(stderr, "sclient: connection closed by the server\n");
            return 0;
        }
        if (errno == EINTR) {
            if (stop_flag) return 0;
            continue;
        }
        die("read");
    }
}

/* Returns the next line (without CRLF) and its length, or NULL if stopped. */
static char *line(size_t *len) {
    size_t scanned = beg;
    for (;;) {
        char *p = memchr(buf + scanned, '\n', end - scanned);
        if (p) {
            char *l = buf + beg;
            *len = (size_t)(p - l) - 1; /* drop \r */
            beg = (size_t)(p - buf) + 1;
            return l;
        }
        scanned = end;
        size_t off = scanned - beg;
        if (!fill()) return NULL;
        scanned = beg + off;
    }
}

/* Ensures n bytes are buffered; 0 if stopped. */
static int need(size_t n) {
    while (end - beg < n)
        if (!fill()) return 0;
    return 1;
}

static int send_all(const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) {
                if (stop_flag) return 0;
                continue;
            }
            die("write");
        }
        p += w;
        n -= w;
    }
    return 1;
}

/* Skips one reply of any type; counts errors. Returns 0 if stopped. */
static int skip_value(void) {
    long long pending = 1;
    while (pending > 0) {
        size_t len;
        char *l = line(&len);
        if (!l) return 0;
        pending--;
        switch (l[0]) {
        case '-':
            errors++;
            if (!first_error[0]) {
                size_t n = len < sizeof first_error - 1 ? len : sizeof first_error - 1;
                memcpy(first_error, l, n);
                first_error[n] = 0;
            }
            break;
        case '$': {
            long long n = atoll(l + 1);
            if (n >= 0) {
                if (!need((size_t)n + 2)) return 0;
                beg += (size_t)n + 2;
            }
            break;
        }
        case '*':
        case '%':
        case '~': {
            long long n = atoll(l + 1);
            if (n > 0) pending += (l[0] == '%') ? 2 * n : n;
            break;
        }
        default:
            break;
        }
    }
    return 1;
}

/* Command template: words, "{}" replaced by the cursor / argument. */
static char **words;
static int nwords;
static char *cmdbuf;
static size_t cmdcap = 1 << 16;

static size_t build(const char *subst) {
    size_t n = 0;
    n += sprintf(cmdbuf + n, "*%d\r\n", nwords);
    for (int i = 0; i < nwords; i++) {
        const char *w = strcmp(words[i], "{}") == 0 ? subst : words[i];
        size_t wl = strlen(w);
        if (n + wl + 64 > cmdcap) {
            cmdcap = (n + wl + 64) * 2;
            cmdbuf = realloc(cmdbuf, cmdcap);
            if (!cmdbuf) die("out of memory");
        }
        n += sprintf(cmdbuf + n, "$%zu\r\n", wl);
        memcpy(cmdbuf + n, w, wl);
        n += wl;
        memcpy(cmdbuf + n, "\r\n", 2);
        n += 2;
    }
    return n;
}

/* Reads a SCAN-shaped reply: [cursor, [items...]]. Stores the next cursor in
 * `cursor` (NUL-terminated), adds the item count to *items. When `keys` is
 * given, appends the items (as NUL-terminated strings) to it. Returns 1 ok,
 * 0 stopped, -1 error reply. */
struct strvec {
    char **v;
    size_t n, cap;
};
static void sv_push(struct strvec *s, const char *p, size_t n) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        if (!s->v) die("out of memory");
    }
    char *c = malloc(n + 1);
    if (!c) die("out of memory");
    memcpy(c, p, n);
    c[n] = 0;
    s->v[s->n++] = c;
}
static void sv_clear(struct strvec *s) {
    for (size_t i = 0; i < s->n; i++) free(s->v[i]);
    s->n = 0;
}

static int read_scan(char *cursor, size_t cursor_cap, long long *items, struct strvec *keys) {
    size_t len;
    char *l = line(&len);
    if (!l) return 0;
    if (l[0] == '-') {
        errors++;
        if (!first_error[0]) {
            size_t n = len < sizeof first_error - 1 ? len : sizeof first_error - 1;
            memcpy(first_error, l, n);
            first_error[n] = 0;
        }
        return -1;
    }
    if (l[0] != '*') {
        fprintf(stderr, "sclient: unexpected reply type '%c'\n", l[0]);
        exit(2);
    }
    l = line(&len); /* cursor bulk header */
    if (!l) return 0;
    long long cl = atoll(l + 1);
    if (!need((size_t)cl + 2)) return 0;
    size_t c = (size_t)cl < cursor_cap - 1 ? (size_t)cl : cursor_cap - 1;
    memcpy(cursor, buf + beg, c);
    cursor[c] = 0;
    beg += (size_t)cl + 2;
    l = line(&len); /* items array header */
    if (!l) return 0;
    long long n = atoll(l + 1);
    for (long long i = 0; i < n; i++) {
        l = line(&len);
        if (!l) return 0;
        if (l[0] != '$') {
            /* RESP3 or nested: skip generically */
            beg -= len + 2;
            if (!skip_value()) return 0;
            continue;
        }
        long long bl = atoll(l + 1);
        if (!need((size_t)bl + 2)) return 0;
        if (keys) sv_push(keys, buf + beg, (size_t)bl);
        beg += (size_t)bl + 2;
    }
    *items += n;
    return 1;
}

static void connect_to(int port) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) die("socket");
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) die("connect 127.0.0.1");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void print_error_json(void) {
    printf(", \"errors\": %lld, \"first_error\": \"", errors);
    for (char *p = first_error; *p; p++)
        if (*p != '"' && *p != '\\') putchar(*p);
    printf("\"");
}

/* A bijection of [0, range) chosen by seed: a few invertible mixing rounds on
 * the smallest power of two >= range (multiplication by an odd constant, adding,
 * xor with a right shift), walking the cycle until the value falls in range. */
static unsigned perm_bits;
static uint64_t perm_mask, perm_range, perm_seed;
static void perm_init(uint64_t range, uint64_t seed) {
    perm_bits = 2;
    while (perm_bits < 63 && ((uint64_t)1 << perm_bits) < range) perm_bits++;
    perm_mask = ((uint64_t)1 << perm_bits) - 1;
    perm_range = range;
    perm_seed = seed;
}
static uint64_t perm(uint64_t x) {
    if (perm_seed == 0) return x;
    unsigned sh = perm_bits / 2 + 1;
    do {
        x = (x * 0x9E3779B97F4A7C15ULL + perm_seed) & perm_mask;
        x ^= x >> sh;
        x = (x * 0xC2B2AE3D27D4EB4FULL + (perm_seed >> 7)) & perm_mask;
        x ^= x >> sh;
        x = (x * 0x165667B19E3779F9ULL + 0x27D4EB2FULL) & perm_mask;
        x ^= x >> sh;
    } while (x >= perm_range);
    return x;
}

/* Appends the command with every "{k}" of the template replaced by k (12 digits). */
static size_t build_k(size_t n, uint64_t k) {
    char num[24];
    int nl = snprintf(num, sizeof num, "%012llu", (unsigned long long)k);
    char arg[1024];
    if (n + 64 * (size_t)nwords + 4096 > cmdcap) {
        cmdcap = (n + 64 * (size_t)nwords + 4096) * 2;
        cmdbuf = realloc(cmdbuf, cmdcap);
        if (!cmdbuf) die("out of memory");
    }
    n += sprintf(cmdbuf + n, "*%d\r\n", nwords);
    for (int w = 0; w < nwords; w++) {
        const char *src = words[w];
        size_t al = 0;
        while (*src && al + (size_t)nl < sizeof arg - 1) {
            if (src[0] == '{' && src[1] == 'k' && src[2] == '}') {
                memcpy(arg + al, num, (size_t)nl);
                al += (size_t)nl;
                src += 3;
            } else
                arg[al++] = *src++;
        }
        if (n + al + 64 > cmdcap) {
            cmdcap = (n + al + 64) * 2;
            cmdbuf = realloc(cmdbuf, cmdcap);
            if (!cmdbuf) die("out of memory");
        }
        n += sprintf(cmdbuf + n, "$%zu\r\n", al);
        memcpy(cmdbuf + n, arg, al);
        n += al;
        memcpy(cmdbuf + n, "\r\n", 2);
        n += 2;
    }
    return n;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: see the comment at the top of sclient.c\n");
        return 2;
    }
    int port = atoi(argv[1]);
    const char *mode = argv[2];
    double seconds = 600;
    long long repeat = 1, max = 1000000000LL;
    const char *scan = "SNAPSHOT.SCAN", *ids_file = NULL, *dump = NULL;
    int nodel = 0, wrap = 0, refill = 0;
    double rate = 0;
    long long count = 0, first = 0, range = 0, depth = 16;
    unsigned long long seed = 0;
    int i = 3;
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            i++;
            break;
        } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--max") && i + 1 < argc) max = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--scan") && i + 1 < argc) scan = argv[++i];
        else if (!strcmp(argv[i], "--ids") && i + 1 < argc) ids_file = argv[++i];
        else if (!strcmp(argv[i], "--dump") && i + 1 < argc) dump = argv[++i];
        else if (!strcmp(argv[i], "--nodel")) nodel = 1;
        else if (!strcmp(argv[i], "--wrap")) wrap = 1;
        else if (!strcmp(argv[i], "--refill")) refill = 1;
        else if (!strcmp(argv[i], "--rate") && i + 1 < argc) rate = atof(argv[++i]);
        else if (!strcmp(argv[i], "--count") && i + 1 < argc) count = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--first") && i + 1 < argc) first = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--range") && i + 1 < argc) range = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--depth") && i + 1 < argc) depth = atoll(argv[++i]);
        else {
            fprintf(stderr, "sclient: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    words = argv + i;
    nwords = argc - i;
    if (seconds > 3600) seconds = 3600;

    struct sigaction sa = {0};
    sa.sa_handler = on_signal; /* no SA_RESTART: blocking reads return EINTR */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    buf = malloc(cap);
    cmdbuf = malloc(cmdcap);
    if (!buf || !cmdbuf) die("out of memory");
    connect_to(port);
    uint64_t t0 = now_us(), deadline = t0 + (uint64_t)(seconds * 1e6);

    if (!strcmp(mode, "ping")) {
        static const char ping[] = "*1\r\n$4\r\nPING\r\n";
        size_t scap = 1 << 20, n = 0;
        uint32_t *s = malloc(scap * sizeof *s);
        uint32_t mx = 0;
        uint64_t max_at = 0;
        while (!stop_flag && n < 50000000) {
            uint64_t a = now_us();
            if (a > deadline) break;
            if (!send_all(ping, sizeof ping - 1)) break;
            size_t len;
            if (!line(&len)) break;
            uint64_t d = now_us() - a;
            if (n == scap) {
                scap *= 2;
                s = realloc(s, scap * sizeof *s);
                if (!s) die("out of memory");
            }
            s[n++] = (uint32_t)d;
            if (d > mx) {
                mx = (uint32_t)d;
                max_at = (a - t0) / 1000;
            }
        }
        qsort(s, n, sizeof *s, cmp_u32);
#define PCT(p) (n ? s[(size_t)((double)(n - 1) * (p))] : 0)
        printf("{\"count\": %zu, \"seconds\": %.3f, \"max_us\": %u, \"max_at_ms\": %llu, \"p50_us\": %u, "
               "\"p99_us\": %u, \"p999_us\": %u, \"p9999_us\": %u}\n",
               n, (now_us() - t0) / 1e6, mx, (unsigned long long)max_at, PCT(0.5), PCT(0.99), PCT(0.999),
               PCT(0.9999));
        return 0;
    }

    if (!strcmp(mode, "loop") || !strcmp(mode, "iter") || !strcmp(mode, "repeat")) {
        if (nwords == 0) {
            fprintf(stderr, "sclient: %s needs a command after --\n", mode);
            return 2;
        }
        int is_loop = !strcmp(mode, "loop"), is_repeat = !strcmp(mode, "repeat");
        long long iterations = 0, calls = 0, items = 0;
        long long target = is_loop ? 1000000000LL : repeat;
        char cursor[64];
        /* repeat: per-call latency samples (microseconds) */
        size_t lcap = is_repeat ? (size_t)(repeat < 10000000 ? repeat : 10000000) + 1 : 1, ln = 0;
        uint32_t *lat = malloc(lcap * sizeof *lat);
        if (!lat) die("out of memory");
        while (!stop_flag && iterations < target && now_us() < deadline) {
            if (is_repeat) {
                size_t n = build("0");
                uint64_t a = now_us();
                if (!send_all(cmdbuf, n) || !skip_value()) break;
                if (ln < lcap) lat[ln++] = (uint32_t)(now_us() - a);
                calls++;
                iterations++;
                continue;
            }
            strcpy(cursor, "0");
            int done = 0;
            for (long long c = 0; c < 100000000LL; c++) {
                size_t n = build(cursor);
                if (!send_all(cmdbuf, n)) break;
                int r = read_scan(cursor, sizeof cursor, &items, NULL);
                if (r == 0) break;
                calls++;
                if (r < 0) {
                    /* an error ends this iteration; back off a little */
                    usleep(1000);
                    break;
                }
                if (!strcmp(cursor, "0")) {
                    done = 1;
                    break;
                }
                if (stop_flag || now_us() > deadline) break;
            }
            if (done) iterations++;
            if (errors > 1000) break;
        }
        printf("{\"iterations\": %lld, \"calls\": %lld, \"items\": %lld, \"elapsed_us\": %llu", iterations,
               calls, items, (unsigned long long)(now_us() - t0));
        if (is_repeat && ln > 0) {
            uint64_t sum = 0;
            for (size_t k = 0; k < ln; k++) sum += lat[k];
            qsort(lat, ln, sizeof *lat, cmp_u32);
            printf(", \"mean_us\": %.2f, \"p50_us\": %u, \"p90_us\": %u, \"p99_us\": %u, \"max_us\": %u",
                   (double)sum / ln, lat[(ln - 1) / 2], lat[(size_t)((ln - 1) * 0.9)], lat[(size_t)((ln - 1) * 0.99)],
                   lat[ln - 1]);
        }
        print_error_json();
        printf("}\n");
        return 0;
    }

    if (!strcmp(mode, "write")) {
        if (nwords == 0 || count <= 0) {
            fprintf(stderr, "sclient: write needs --count N and a command after --\n");
            return 2;
        }
        if (range <= 0) range = first + count;
        if (first < 0 || first >= range || depth < 1 || depth > 100000) {
            fprintf(stderr, "sclient: write: needs 0 <= first < range, 1 <= depth <= 100000\n");
            return 2;
        }
        perm_init((uint64_t)range, seed);
        long long done = 0;
        while (!stop_flag && done < count) {
            uint64_t t = now_us();
            if (t > deadline) break;
            if (rate > 0) {
                uint64_t due = t0 + (uint64_t)((double)done * 1e6 / rate);
                if (due > t) {
                    if (due > deadline) break;
                    usleep((useconds_t)(due - t));
                    if (stop_flag) break;
                }
            }
            long long b = count - done < depth ? count - done : depth;
            size_t n = 0;
            for (long long j = 0; j < b; j++) n = build_k(n, perm((uint64_t)((first + done + j) % range)));
            if (!send_all(cmdbuf, n)) break;
            long long got = 0;
            while (got < b && skip_value()) got++;
            done += got;
            if (got < b || errors > 1000) break;
        }
        printf("{\"n\": %lld, \"elapsed_us\": %llu", done, (unsigned long long)(now_us() - t0));
        print_error_json();
        printf("}\n");
        return 0;
    }

    if (!strcmp(mode, "inval")) {
        if (!ids_file) {
            fprintf(stderr, "sclient: inval needs --ids FILE\n");
            return 2;
        }
        FILE *f = fopen(ids_file, "r");
        if (!f) die("opening --ids");
        FILE *df = dump ? fopen(dump, "w") : NULL;
        if (dump && !df) die("opening --dump");
        static char *tmpl[8];
        char pattern[128];
        tmpl[0] = (char *)scan;
        tmpl[1] = "{}";
        tmpl[2] = "MATCH";
        tmpl[3] = pattern;
        tmpl[4] = "COUNT";
        tmpl[5] = "1000";
        words = tmpl;
        nwords = 6;
        struct strvec keys = {0};
        size_t tcap = 1024, nt = 0;
        uint32_t *times = malloc(tcap * sizeof *times);
        long long calls = 0, total_keys = 0;
        char id[64], cursor[64];
        long long wraps = 0;
        while (!stop_flag && (long long)nt < max && now_us() < deadline) {
            if (!fgets(id, sizeof id, f)) {
                /* --wrap: start the list again (those users are already gone) */
                if (!wrap || nt == 0 || ++wraps > 1000) break;
                rewind(f);
                continue;
            }
            id[strcspn(id, "\r\n")] = 0;
            if (!id[0]) continue;
            snprintf(pattern, sizeof pattern, "user:%s:*", id);
            if (rate > 0) {
                uint64_t due = t0 + (uint64_t)((double)nt * 1e6 / rate), t = now_us();
                if (due > t) {
                    if (due > deadline) break;
                    usleep((useconds_t)(due - t));
                    if (stop_flag) break;
                }
            }
            uint64_t a = now_us();
            strcpy(cursor, "0");
            sv_clear(&keys);
            int ok = 0;
            for (long long c = 0; c < 100000000LL; c++) {
                size_t n = build(cursor);
                if (!send_all(cmdbuf, n)) break;
                long long items = 0;
                int r = read_scan(cursor, sizeof cursor, &items, &keys);
                if (r <= 0) break;
                calls++;
                if (!strcmp(cursor, "0")) {
                    ok = 1;
                    break;
                }
            }
            if (!ok) break;
            if (!nodel && keys.n > 0) {
                /* DEL key... */
                size_t n = 0, need_bytes = 32;
                for (size_t k = 0; k < keys.n; k++) need_bytes += strlen(keys.v[k]) + 32;
                if (need_bytes > cmdcap) {
                    cmdcap = need_bytes;
                    cmdbuf = realloc(cmdbuf, cmdcap);
                    if (!cmdbuf) die("out of memory");
                }
                n += sprintf(cmdbuf + n, "*%zu\r\n$3\r\nDEL\r\n", keys.n + 1);
                for (size_t k = 0; k < keys.n; k++)
                    n += sprintf(cmdbuf + n, "$%zu\r\n%s\r\n", strlen(keys.v[k]), keys.v[k]);
                if (!send_all(cmdbuf, n) || !skip_value()) break;
                words = tmpl;
                nwords = 6;
            }
            uint64_t d = now_us() - a;
            if (refill && !nodel && keys.n > 0) {
                size_t n = 0;
                n += sprintf(cmdbuf + n, "*%zu\r\n$4\r\nMSET\r\n", 2 * keys.n + 1);
                for (size_t k = 0; k < keys.n; k++)
                    n += sprintf(cmdbuf + n, "$%zu\r\n%s\r\n$1\r\nx\r\n", strlen(keys.v[k]), keys.v[k]);
                if (!send_all(cmdbuf, n) || !skip_value()) break;
            }
            if (nt == tcap) {
                tcap *= 2;
                times = realloc(times, tcap * sizeof *times);
                if (!times) die("out of memory");
            }
            times[nt++] = (uint32_t)d;
            total_keys += keys.n;
            if (df)
                for (size_t k = 0; k < keys.n; k++) fprintf(df, "%s %s\n", id, keys.v[k]);
        }
        if (df) fclose(df);
        printf("{\"n\": %zu, \"calls\": %lld, \"keys\": %lld, \"wraps\": %lld, \"elapsed_us\": %llu", nt, calls,
               total_keys, wraps, (unsigned long long)(now_us() - t0));
        print_error_json();
        printf(", \"times_us\": [");
        for (size_t k = 0; k < nt; k++) printf(k ? ",%u" : "%u", times[k]);
        printf("]}\n");
        return 0;
    }
    fprintf(stderr, "sclient: unknown mode %s\n", mode);
    return 2;
}
