/* Runs the worked example of include/hyfi.h (compiled from the header itself)
 * on random images: it must train without error and write its parameters. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int train(const float *images, const int32_t *labels, int steps);

int main(void)
{
    enum { STEPS = 3, B = 64, PIX = 784 };
    float *images = malloc(sizeof(float) * STEPS * B * PIX);
    int32_t *labels = malloc(sizeof(int32_t) * STEPS * B);
    if (!images || !labels) return 99;
    uint64_t s = 1;
    for (size_t i = 0; i < (size_t)STEPS * B * PIX; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        images[i] = (float)(s >> 40) / 16777216.0f;
    }
    for (int i = 0; i < STEPS * B; i++) labels[i] = i % 10;
    int rc = train(images, labels, STEPS);
    int wrote = access("model.hyfi", R_OK) == 0;
    unlink("model.hyfi");
    printf("%d passed, %d failed\n", (rc == 0) + wrote, (rc != 0) + !wrote);
    free(images);
    free(labels);
    return rc == 0 && wrote ? 0 : 1;
}
