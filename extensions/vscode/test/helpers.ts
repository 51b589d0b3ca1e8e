import * as fs from "fs";
import * as path from "path";

/** Fixtures live in test/fixtures (not copied to out/): resolve from the compiled file's place. */
export const FIXTURES = path.resolve(__dirname, "..", "..", "test", "fixtures");

export function fixture(name: string): string {
  return fs.readFileSync(path.join(FIXTURES, name), "utf8");
}
