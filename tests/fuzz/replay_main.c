/* Replays every file of a corpus folder (argv[1]) through LLVMFuzzerTestOneInput, so the normal
 * test run exercises each fuzz target on its corpus without libFuzzer. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
        if (argc != 2) {
                fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
                return 2;
        }
        DIR *d = opendir(argv[1]);
        if (!d) {
                fprintf(stderr, "cannot open corpus %s\n", argv[1]);
                return 1;
        }
        struct dirent *e;
        unsigned n = 0;
        while ((e = readdir(d))) {
                if (e->d_name[0] == '.')
                        continue;
                char path[4096];
                snprintf(path, sizeof(path), "%s/%s", argv[1], e->d_name);
                FILE *f = fopen(path, "rb");
                if (!f)
                        continue;
                struct stat st;
                if (fstat(fileno(f), &st) || st.st_size > (1 << 24)) {
                        fclose(f);
                        continue;
                }
                uint8_t *buf = malloc((size_t)st.st_size + 1);
                size_t got = fread(buf, 1, (size_t)st.st_size, f);
                fclose(f);
                LLVMFuzzerTestOneInput(buf, got);
                free(buf);
                n++;
        }
        closedir(d);
        printf("replayed %u inputs\n", n);
        return n ? 0 : 1;
}
