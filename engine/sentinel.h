/* The death notice of MPI runs, shared by its two halves: sentinel.c (the
 * rank's side: fork, pipe, what the rank tells its child) and
 * sentinel_child.c (the child that outlives the rank and names the first
 * death of the job). Internal to engine/. */
#ifndef HYFI_ENGINE_SENTINEL_H
#define HYFI_ENGINE_SENTINEL_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

/* What the rank writes into the pipe: single bytes, and lines. */
#define SENT_QUIT '\0'   /* the process ends in order */
#define SENT_ENDING 'E'  /* "E\n": the rank ends the job itself (watchdog, time limits): its own
                            line says why; the others' deaths that follow are consequences */
#define SENT_ARM 'A'     /* "A<rank> <nranks> <pid> <host>\n" */
#define SENT_SIBLINGS 'S' /* "S<pid> <pid> ...\n": the other ranks on this host */
#define SENT_PEER 'P'    /* "P<rank> <port> <a1> <a2> <a3> <a4>\n": a rank's child's UDP port
                            and IPv4 addresses (0: none), one line per rank of the job */
#define SENT_JOB 'J'     /* "J<id>\n": the job's id (rank 0's), in every record */
#define SENT_CRASH 'C'   /* 'C' and the signal number as one byte */

#define SENT_MAX_SIB 255  /* siblings watched */
#define SENT_HOST_MAX 64
#define SENT_MAX_HEARD 8  /* deaths a record says were heard of before its own */
#define SENT_ADDRS 4      /* IPv4 addresses per rank */
#define SENT_MAX_PEERS 4096
#define SENT_MAGIC UINT64_C(0x68796669646561) /* "hyfidea" */

enum { SENT_ALIVE, SENT_EXITING, SENT_GONE };

/* One rank's death, as its child saw it (sent to the others as is). */
typedef struct sent_death {
    uint64_t magic, job;
    int64_t t_ns;  /* CLOCK_REALTIME when the pipe closed or the crash was told */
    int32_t pid, rank, nranks;
    int32_t sig;   /* the crash's signal; 0 killed; -1 the rank ended the job itself */
    int32_t nsib, nheard;
    int32_t heard[SENT_MAX_HEARD]; /* ranks whose death this child heard of before its own */
    char host[SENT_HOST_MAX];
    int32_t sib[SENT_MAX_SIB];
    uint8_t state[SENT_MAX_SIB];
} sent_death;

/* A peer rank's child: where its records go. */
typedef struct sent_peer {
    uint16_t port;
    uint32_t addr[SENT_ADDRS]; /* network byte order; 0: none */
} sent_peer;

/* Write all n bytes of s to fd (async-signal-safe; gives up on an error). */
void hyfi_sentinel_put(int fd, const char *s, size_t n);

/* The child's life: reads the pipe rfd until the rank ends; udp: its socket
 * for the other ranks' records (-1: none); claim/len: the abstract socket of
 * this host's deaths (ranks that die before they know their peers); early:
 * the line for a death before the rank knows its rank. Never returns. */
_Noreturn void hyfi_sentinel_child(int rfd, int udp, int maxfd, const char *early, size_t nearly,
                                   const struct sockaddr_un *claim, socklen_t len);

#endif
