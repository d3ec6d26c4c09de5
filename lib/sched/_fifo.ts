/**
 * The lane scheduler's per-class queue.
 *
 * @module
 */

/** FIFO with O(1) push/shift and O(n) removal (aborts only). */
export class Fifo<T> {
  #items: T[] = [];
  #head = 0;

  get length(): number {
    return this.#items.length - this.#head;
  }

  push(item: T): void {
    this.#items.push(item);
  }

  peek(): T | undefined {
    return this.#head < this.#items.length ? this.#items[this.#head] : undefined;
  }

  shift(): T | undefined {
    if (this.#head >= this.#items.length) return undefined;
    const item = this.#items[this.#head]!;
    this.#head++;
    if (this.#head === this.#items.length) {
      this.#items = [];
      this.#head = 0;
    } else if (this.#head >= 1024 && this.#head * 2 >= this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
    return item;
  }

  remove(item: T): boolean {
    const i = this.#items.indexOf(item, this.#head);
    if (i < 0) return false;
    this.#items.splice(i, 1);
    return true;
  }
}
