/* The AppImage runtime: the small program at the front of Tandem's AppImage. The image is
 * this ELF file followed by a squashfs of the AppDir. Started, it mounts the squashfs at its
 * offset with FUSE (Debian's squashfuse and libfuse3, linked in statically, so the runtime
 * needs nothing but the C library), runs AppRun from it, and unmounts when AppRun exits.
 * Where FUSE is missing it says so and runs from a temporary extraction instead.
 *
 *   --appimage-extract [PATH]     extract the whole image (or what starts with PATH) into
 *                                 ./squashfs-root
 *   --appimage-extract-and-run    extract into a temporary folder, run, remove it
 *   --appimage-offset             print where the squashfs starts
 *   --appimage-help               this list
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <squashfuse/ll.h>
#include <squashfuse/traverse.h>
#include <squashfuse/util.h>

static const char* self_path(void) {
  static char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return NULL;
  path[n] = '\0';
  return path;
}

/* The end of this ELF file: its section headers come last. */
static long squashfs_offset(const char* path) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) return -1;
  Elf64_Ehdr h;
  const size_t got = fread(&h, 1, sizeof h, f);
  fclose(f);
  if (got != sizeof h || memcmp(h.e_ident, ELFMAG, SELFMAG) != 0 || h.e_ident[EI_CLASS] != ELFCLASS64)
    return -1;
  return (long)(h.e_shoff + (Elf64_Off)h.e_shentsize * h.e_shnum);
}

static int write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    data += n;
    size -= (size_t)n;
  }
  return 0;
}

static int make_parents(char* path) {
  for (char* p = path + 1; *p; ++p) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
      *p = '/';
      return -1;
    }
    *p = '/';
  }
  return 0;
}

/* Extracts the image's files that start with `prefix` (all when NULL) under `dest`. */
static int extract(const char* image, long offset, const char* dest, const char* prefix) {
  sqfs_fd_t fd;
  if (sqfs_fd_open(image, &fd, false) != SQFS_OK) {
    fprintf(stderr, "tandem: cannot open %s: %s\n", image, strerror(errno));
    return -1;
  }
  sqfs fs;
  if (sqfs_init(&fs, fd, (size_t)offset) != SQFS_OK) {
    fprintf(stderr, "tandem: %s holds no readable image at offset %ld; download it again.\n",
            image, offset);
    sqfs_fd_close(fd);
    return -1;
  }
  sqfs_traverse trv;
  int status = 0;
  if (sqfs_traverse_open(&trv, &fs, sqfs_inode_root(&fs)) != SQFS_OK) status = -1;
  sqfs_err err = SQFS_OK;
  static char buffer[1 << 16];
  while (status == 0 && sqfs_traverse_next(&trv, &err)) {
    if (trv.dir_end) continue;
    if (prefix != NULL && strncmp(trv.path, prefix, strlen(prefix)) != 0) continue;
    sqfs_inode inode;
    if (sqfs_inode_get(&fs, &inode, trv.entry.inode) != SQFS_OK) {
      status = -1;
      break;
    }
    char target[PATH_MAX];
    if (snprintf(target, sizeof target, "%s/%s", dest, trv.path) >= (int)sizeof target) {
      status = -1;
      break;
    }
    make_parents(target);
    const mode_t mode = inode.base.mode & 07777;
    const int type = inode.base.inode_type;
    if (S_ISDIR(sqfs_mode(type))) {
      if (mkdir(target, 0755) != 0 && errno != EEXIST) status = -1;
    } else if (S_ISREG(sqfs_mode(type))) {
      const int out = open(target, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (out < 0) {
        status = -1;
        break;
      }
      sqfs_off_t at = 0;
      const sqfs_off_t size = (sqfs_off_t)inode.xtra.reg.file_size;
      while (status == 0 && at < size) {
        sqfs_off_t n = size - at < (sqfs_off_t)sizeof buffer ? size - at : (sqfs_off_t)sizeof buffer;
        if (sqfs_read_range(&fs, &inode, at, &n, buffer) != SQFS_OK || n <= 0 ||
            write_all(out, buffer, (size_t)n) != 0)
          status = -1;
        at += n;
      }
      if (close(out) != 0) status = -1;
      chmod(target, mode);
    } else if (S_ISLNK(sqfs_mode(type))) {
      char link[PATH_MAX];
      size_t n = sizeof link;
      if (sqfs_readlink(&fs, &inode, link, &n) != SQFS_OK) {
        status = -1;
        break;
      }
      unlink(target);
      if (symlink(link, target) != 0) status = -1;
    }
  }
  if (err != SQFS_OK) status = -1;
  sqfs_traverse_close(&trv);
  sqfs_destroy(&fs);
  sqfs_fd_close(fd);
  if (status != 0)
    fprintf(stderr, "tandem: extracting %s into %s failed: %s\n", image, dest,
            errno ? strerror(errno) : "the image is damaged; download it again");
  return status;
}

static int remove_entry(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void set_environment(const char* image, const char* root, const char* argv0) {
  char cwd[PATH_MAX];
  setenv("APPIMAGE", image, 1);
  setenv("APPDIR", root, 1);
  setenv("ARGV0", argv0, 1);
  if (getcwd(cwd, sizeof cwd) != NULL) setenv("OWD", cwd, 1);
}

/* Runs AppRun in `root` with the arguments; its exit status. */
static int run_app(const char* image, const char* root, int argc, char** argv) {
  char app_run[PATH_MAX];
  snprintf(app_run, sizeof app_run, "%s/AppRun", root);
  const pid_t child = fork();
  if (child < 0) return 127;
  if (child == 0) {
    set_environment(image, root, argv[0]);
    char** args = calloc((size_t)argc + 1, sizeof *args);
    args[0] = app_run;
    for (int i = 1; i < argc; ++i) args[i] = argv[i];
    execv(app_run, args);
    fprintf(stderr, "tandem: cannot start %s: %s\n", app_run, strerror(errno));
    _exit(127);
  }
  /* The app gets the terminal's Ctrl+C; this process waits for it to finish. */
  signal(SIGINT, SIG_IGN);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  signal(SIGINT, SIG_DFL);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int extract_and_run(const char* image, long offset, int argc, char** argv) {
  const char* tmp = getenv("TMPDIR");
  char root[PATH_MAX];
  snprintf(root, sizeof root, "%s/.tandem-appimage-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (mkdtemp(root) == NULL) {
    fprintf(stderr, "tandem: cannot make a temporary folder in %s: %s\n",
            tmp && *tmp ? tmp : "/tmp", strerror(errno));
    return 127;
  }
  int status = extract(image, offset, root, NULL) == 0 ? run_app(image, root, argc, argv) : 127;
  nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return status;
}

/* The FUSE side, in a child process: serves the image at `mountpoint` until SIGTERM (libfuse's
 * own handlers end the session loop, and the image is unmounted). */

static int serve_image(const char* image, long offset, const char* mountpoint, int ready_fd) {
  struct fuse_lowlevel_ops ops;
  memset(&ops, 0, sizeof ops);
  ops.getattr = sqfs_ll_op_getattr;
  ops.opendir = sqfs_ll_op_opendir;
  ops.releasedir = sqfs_ll_op_releasedir;
  ops.readdir = sqfs_ll_op_readdir;
  ops.lookup = sqfs_ll_op_lookup;
  ops.open = sqfs_ll_op_open;
  ops.create = sqfs_ll_op_create;
  ops.release = sqfs_ll_op_release;
  ops.read = sqfs_ll_op_read;
  ops.readlink = sqfs_ll_op_readlink;
  ops.listxattr = sqfs_ll_op_listxattr;
  ops.getxattr = sqfs_ll_op_getxattr;
  ops.forget = sqfs_ll_op_forget;
  ops.statfs = stfs_ll_op_statfs;

  sqfs_ll* ll = sqfs_ll_open(image, (size_t)offset);
  char ok = 0;
  if (ll == NULL) {
    write_all(ready_fd, &ok, 1);
    return 1;
  }
  char* fuse_argv[] = {"tandem", "-o", "ro,nodev,nosuid,subtype=tandem", NULL};
  struct fuse_args args = FUSE_ARGS_INIT(3, fuse_argv);
  sqfs_ll_chan ch;
  /* libfuse says why a mount fails on stderr; the parent adds what to do. */
  if (sqfs_ll_mount(&ch, mountpoint, &args, &ops, sizeof ops, ll) != SQFS_OK) {
    write_all(ready_fd, &ok, 1);
    return 1;
  }
  if (fuse_set_signal_handlers(ch.session) != 0) {
    sqfs_ll_unmount(&ch, mountpoint);
    write_all(ready_fd, &ok, 1);
    return 1;
  }
  signal(SIGINT, SIG_IGN); /* the terminal's Ctrl+C is the app's */
  ok = 1;
  write_all(ready_fd, &ok, 1);
  close(ready_fd);
  fuse_session_loop(ch.session);
  fuse_remove_signal_handlers(ch.session);
  sqfs_ll_unmount(&ch, mountpoint);
  return 0;
}

static int mount_and_run(const char* image, long offset, int argc, char** argv) {
  const char* tmp = getenv("TMPDIR");
  char mountpoint[PATH_MAX];
  snprintf(mountpoint, sizeof mountpoint, "%s/.mount_Tandem-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (mkdtemp(mountpoint) == NULL) return -1;
  int ready[2];
  if (pipe(ready) != 0) {
    rmdir(mountpoint);
    return -1;
  }
  const pid_t server = fork();
  if (server < 0) {
    rmdir(mountpoint);
    return -1;
  }
  if (server == 0) {
    close(ready[0]);
    _exit(serve_image(image, offset, mountpoint, ready[1]));
  }
  close(ready[1]);
  char ok = 0;
  const ssize_t n = read(ready[0], &ok, 1);
  close(ready[0]);
  if (n != 1 || ok != 1) {
    waitpid(server, NULL, 0);
    rmdir(mountpoint);
    return -1;
  }
  const int status = run_app(image, mountpoint, argc, argv);
  kill(server, SIGTERM);
  waitpid(server, NULL, 0);
  rmdir(mountpoint);
  return status;
}

int main(int argc, char** argv) {
  const char* image = self_path();
  const long offset = image ? squashfs_offset(image) : -1;
  if (offset <= 0) {
    fprintf(stderr, "tandem: cannot read this AppImage's own file; run it by its path.\n");
    return 127;
  }
  const char* first = argc > 1 ? argv[1] : "";
  if (strcmp(first, "--appimage-offset") == 0) {
    printf("%ld\n", offset);
    return 0;
  }
  if (strcmp(first, "--appimage-help") == 0) {
    printf("Tandem AppImage options:\n"
           "  --appimage-extract [PATH]   extract into ./squashfs-root\n"
           "  --appimage-extract-and-run  run from a temporary extraction (no FUSE needed)\n"
           "  --appimage-offset           print where the image's files start\n");
    return 0;
  }
  if (strcmp(first, "--appimage-extract") == 0) {
    mkdir("squashfs-root", 0755);
    if (extract(image, offset, "squashfs-root", argc > 2 ? argv[2] : NULL) != 0) return 1;
    printf("Extracted into squashfs-root; run squashfs-root/AppRun.\n");
    return 0;
  }
  if (strcmp(first, "--appimage-extract-and-run") == 0) {
    /* The option is the runtime's, not the app's. */
    argv[1] = argv[0];
    return extract_and_run(image, offset, argc - 1, argv + 1);
  }
  const char* env = getenv("APPIMAGE_EXTRACT_AND_RUN");
  if (env != NULL && strcmp(env, "1") == 0) return extract_and_run(image, offset, argc, argv);
  const int status = mount_and_run(image, offset, argc, argv);
  if (status >= 0) return status;
  fprintf(stderr,
          "tandem: this AppImage could not be mounted (FUSE is missing or not allowed here); "
          "running it from a temporary extraction instead. Install fuse3 to start faster, or "
          "use --appimage-extract-and-run to skip this attempt.\n");
  return extract_and_run(image, offset, argc, argv);
}
