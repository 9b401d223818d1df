# node-gyp's view of the addon, for the tools that only speak node-gyp: prebuildify
# (`npm run prebuild`) and node-gyp-build's from-source fallback at `npm install`.
# It compiles nothing itself: its one action runs native/build_addon.mjs, which builds
# CMakeLists.txt — the one build definition — with cmake-js and copies mstar.node to
# build/Release, where both tools look for it. Both run `node-gyp rebuild`, which clears
# build/ first, so the action always runs; CMake (tree in build-cmake/) decides what is stale.
{
  "targets": [
    {
      "target_name": "mstar",
      "type": "none",
      "actions": [
        {
          "action_name": "cmake_js",
          "inputs": ["CMakeLists.txt"],
          "outputs": ["<(PRODUCT_DIR)/mstar.node"],
          "action": ["node", "native/build_addon.mjs", "<(PRODUCT_DIR)/mstar.node"]
        }
      ]
    }
  ]
}
