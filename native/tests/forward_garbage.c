/*
 * A hostile forwarded command: writes into its own forwarding segment what
 * the client never would, then waits to see what its context server says.
 *
 *   forward_garbage oversized   a request larger than a quarter of the ring
 *   forward_garbage malformed   a request whose size is not a multiple of 8
 *
 * Prints the server's state and reason once it stopped serving; exits 0 then,
 * 1 when it kept serving for 10 s.
 */
#include <fcntl.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "krex_forward.h"

int main(int argc, char **argv)
{
    const char *path = getenv(KREX_FWD_ENV_RING);
    if (argc < 2 || path == NULL)
        return 2;
    int fd = open(path, O_RDWR);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return 2;
    uint8_t *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return 2;
    struct krex_fwd_header *h = (struct krex_fwd_header *)p;
    struct krex_fwd_msg *m = (struct krex_fwd_msg *)(p + KREX_FWD_HEADER_SIZE);
    memset(m, 0, sizeof *m);
    m->op = 1; /* cuInit */
    m->flags = KREX_FWD_WANT_REPLY;
    uint64_t size = strcmp(argv[1], "oversized") == 0 ? h->ring_size / 2 : 133;
    m->size = (uint32_t)size;
    __atomic_store_n(&h->req_head, (size + 7) & ~7ull, __ATOMIC_RELEASE);
    __atomic_fetch_add(&h->req_seq, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &h->req_seq, FUTEX_WAKE, 1, NULL, NULL, 0);
    for (int i = 0; i < 1000; i++) {
        if (__atomic_load_n(&h->server_state, __ATOMIC_ACQUIRE) == KREX_FWD_STATE_FAILED) {
            printf("server stopped: %.200s\n", h->reason);
            return 0;
        }
        usleep(10000);
    }
    printf("server kept serving\n");
    return 1;
}
