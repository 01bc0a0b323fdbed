#include <stdio.h>
int main(void)
{
        puts("shoal");
        return 0;
}
