pytest_plugins = ["tests.plugins.anvil", "tests.plugins.arlocal"]
