/** @type {import('jest').Config} */
module.exports = {
  // Most suites wait on PostgreSQL, sockets and timers, not on the CPU: four workers keep two cores busy.
  maxWorkers: 4,
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: {
    '^.+\\.(t|j|mj)s$': ['@swc/jest', { jsc: { target: 'es2023', parser: { syntax: 'typescript' } }, module: { type: 'commonjs' } }],
  },
  // MikroORM and kysely ship ESM only; let swc compile them for jest's CommonJS runtime.
  transformIgnorePatterns: ['/node_modules/(?!(@mikro-orm|kysely)/)'],
  moduleFileExtensions: ['ts', 'js', 'mjs', 'json'],
  testSequencer: '<rootDir>/test/support/sequencer.mjs',
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  globalTeardown: '<rootDir>/test/support/global-teardown.ts',
  testTimeout: 30000,
};
