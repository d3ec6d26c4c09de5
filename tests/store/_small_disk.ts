/**
 * A real small filesystem for disk-full tests: a tmpfs mounted on a temp directory (needs root
 * and the mount syscall). {@link smallDisk} answers undefined where it cannot mount, so a test
 * can fall back to SQLite's own `max_page_count` limit (a real SQLITE_FULL, not a mock).
 */

/** A mounted tmpfs. */
export interface SmallDisk extends AsyncDisposable {
  /** Mount point. */
  dir: string;
  /** Fills the disk until at most `leaveBytes` (rounded to 4 KiB) stay free. */
  fill(leaveBytes?: number): void;
  /** Removes what {@link SmallDisk.fill} wrote. */
  free(): void;
}

/**
 * Mounts a tmpfs of `sizeBytes` on a fresh temp directory.
 *
 * @returns The disk, or undefined (with the reason printed) when it cannot be mounted.
 */
export async function smallDisk(sizeBytes: number): Promise<SmallDisk | undefined> {
  if (Deno.build.os !== "linux" || Deno.uid() !== 0) {
    console.log("small disk: not root on Linux, so no tmpfs; using SQLite's max_page_count");
    return undefined;
  }
  const dir = await Deno.makeTempDir({ prefix: "synapse-small-disk-" });
  const mount = await new Deno.Command("mount", {
    args: ["-t", "tmpfs", "-o", `size=${sizeBytes},mode=0700`, "tmpfs", dir],
    stdout: "null",
    stderr: "piped",
  }).output();
  if (!mount.success) {
    console.log(`small disk: mount failed (${new TextDecoder().decode(mount.stderr).trim()})`);
    await Deno.remove(dir);
    return undefined;
  }
  const fillers: string[] = [];
  return {
    dir,
    fill(leaveBytes = 0): void {
      const chunk = new Uint8Array(4096);
      const path = `${dir}/filler-${fillers.length}`;
      fillers.push(path);
      const f = Deno.openSync(path, { write: true, create: true });
      try {
        const { bavail, bsize } = statfs(dir);
        let room = bavail * bsize - leaveBytes;
        while (room > 0) {
          try {
            f.writeSync(chunk);
          } catch {
            break; // full
          }
          room -= chunk.length;
        }
      } finally {
        f.close();
      }
    },
    free(): void {
      for (const p of fillers.splice(0)) Deno.removeSync(p);
    },
    async [Symbol.asyncDispose](): Promise<void> {
      await new Deno.Command("umount", { args: ["-l", dir] }).output();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    },
  };
}

/** Free blocks of the filesystem at `dir`, from `df` (Deno has no statfs). */
function statfs(dir: string): { bavail: number; bsize: number } {
  const out = new Deno.Command("df", { args: ["-B1", "--output=avail", dir] }).outputSync();
  const avail = Number(new TextDecoder().decode(out.stdout).trim().split("\n").pop());
  return { bavail: avail, bsize: 1 };
}
