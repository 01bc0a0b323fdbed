/* How IORPC answers a cache hit (--iorpc-mode). */
#ifndef SHOAL_SERVER_MODE_H
#define SHOAL_SERVER_MODE_H

enum shoal_iorpc_mode {
        SHOAL_IORPC_DIO = 0,
        SHOAL_IORPC_PAGECACHE = 1,
        SHOAL_IORPC_SPLICE = 2,
        SHOAL_IORPC_DISABLE = 3,
};

/* "dio", "pagecache", "splice", "disable" -> mode; -1 for anything else. */
int shoal_iorpc_mode_parse(const char *s);
const char *shoal_iorpc_mode_name(int mode);

#endif
