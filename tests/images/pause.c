/* The pod sandbox's pause process, built here because no image can be
 * pulled: it holds the pod's namespaces, reaps orphans (it is PID 1 of the
 * pod when process namespaces are shared) and exits on SIGTERM or SIGINT. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, 0, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction term = {.sa_handler = stop}, child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
    sigaction(SIGINT, &term, 0);
    sigaction(SIGTERM, &term, 0);
    sigaction(SIGCHLD, &child, 0);
    for (;;) pause();
}
