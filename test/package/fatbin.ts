// Lists the CUDA code embedded in a shared object (its .nv_fatbin section): machine code (ELF)
// and PTX, by SM version — what `cuobjdump --list-elf --list-ptx` says, without a CUDA toolkit.
import { readFileSync } from 'node:fs';

export interface FatbinEntry { kind: 'ptx' | 'elf'; sm: number }

const FATBIN_MAGIC = 0xba55ed50;

function section(elf: Buffer, name: string): { offset: number; size: number } | undefined {
  if (elf.readUInt32BE(0) !== 0x7f454c46 || elf[4] !== 2) throw new Error('not a 64-bit ELF file');
  const shoff = Number(elf.readBigUInt64LE(0x28));
  const shentsize = elf.readUInt16LE(0x3a);
  const shnum = elf.readUInt16LE(0x3c);
  const shstrndx = elf.readUInt16LE(0x3e);
  const header = (i: number) => shoff + i * shentsize;
  const strtab = Number(elf.readBigUInt64LE(header(shstrndx) + 24));
  for (let i = 0; i < shnum; i++) {
    const h = header(i);
    const at = strtab + elf.readUInt32LE(h);
    if (elf.toString('latin1', at, elf.indexOf(0, at)) === name) {
      return { offset: Number(elf.readBigUInt64LE(h + 24)), size: Number(elf.readBigUInt64LE(h + 32)) };
    }
  }
  return undefined;
}

/** Every entry of every fatbinary in the file's .nv_fatbin section (none without one). */
export function fatbinEntries(path: string): FatbinEntry[] {
  const elf = readFileSync(path);
  const s = section(elf, '.nv_fatbin');
  if (!s) return [];
  const entries: FatbinEntry[] = [];
  let pos = s.offset;
  const end = s.offset + s.size;
  while (pos + 16 <= end) {
    if (elf.readUInt32LE(pos) !== FATBIN_MAGIC) {
      pos += 8; // fatbinaries are 8-byte aligned, with padding between them
      continue;
    }
    const headerSize = elf.readUInt16LE(pos + 6);
    const last = pos + headerSize + Number(elf.readBigUInt64LE(pos + 8));
    for (let p = pos + headerSize; p < last;) {
      const kind = elf.readUInt16LE(p);
      if (kind === 1 || kind === 2) entries.push({ kind: kind === 1 ? 'ptx' : 'elf', sm: elf.readUInt32LE(p + 28) });
      p += elf.readUInt32LE(p + 4) + Number(elf.readBigUInt64LE(p + 8));
    }
    pos = last;
  }
  return entries;
}
