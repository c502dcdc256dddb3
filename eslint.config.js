// Lint: typescript-eslint's type-checked rules, chosen over Biome for the rules this code needs
// most (floating and misused promises across async I/O). Formatting is prettier's job alone.
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['**/dist/', 'native/build/', 'native/prebuilds/', 'bench/out/', 'coverage/', '.test-tmp/'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      globals: globals.node,
      parserOptions: { project: ['./tsconfig.test.json'], tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // Rejecting with an AbortSignal's reason is what Node's own APIs do; the reason is `any`. A
      // function that is not async passes on what its checks threw (`unknown`) as a rejection.
      '@typescript-eslint/prefer-promise-reject-errors': [
        'error',
        { allowThrowingAny: true, allowThrowingUnknown: true },
      ],
    },
  },
  // The console's page scripts run in a browser: their own project (DOM types) and globals.
  {
    files: ['ticketing/console/src/**/*.ts'],
    languageOptions: {
      globals: globals.browser,
      parserOptions: { project: ['./ticketing/console/tsconfig.json'], tsconfigRootDir: import.meta.dirname },
    },
  },
  // One job per file: at most 500 lines of code per source file (blank lines and comments not
  // counted), the benchmarks and scripts included. Add a package's sources to `files` to hold them
  // to it. (Import cycles are scripts/check-cycles.mjs's, in `npm run lint`.)
  {
    files: [
      'src/**/*.ts',
      'ticketing/src/**/*.ts',
      'ticketing/console/src/**/*.ts',
      'bench/**/*.{js,mjs}',
      'scripts/**/*.{js,mjs}',
    ],
    rules: { 'max-lines': ['error', { max: 500, skipBlankLines: true, skipComments: true }] },
  },
  // Plain JS (benchmarks, fixtures, config): no type information, so only the untyped rules.
  { files: ['**/*.js', '**/*.mjs', '**/*.cjs'], ...tseslint.configs.disableTypeChecked },
  prettier,
);
