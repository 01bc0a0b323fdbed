#include <string.h>

#include "server/mode.h"

static const char *const mode_names[] = {"dio", "pagecache", "splice", "disable"};

int shoal_iorpc_mode_parse(const char *s)
{
        for (int i = 0; i < 4; i++)
                if (!strcmp(s, mode_names[i]))
                        return i;
        return -1;
}

const char *shoal_iorpc_mode_name(int mode)
{
        return mode >= 0 && mode < 4 ? mode_names[mode] : "dio";
}
