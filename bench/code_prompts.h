/* code_prompts.h — 20 short Python code prompts shared by the speculative
 * decoding benchmark and the exactness tests (the demo models are trained on
 * Python source). Included as data: static, one copy per user. */
#ifndef SD_CODE_PROMPTS_H
#define SD_CODE_PROMPTS_H

#define SD_N_CODE_PROMPTS 20

static const char *const SD_CODE_PROMPTS[SD_N_CODE_PROMPTS] = {
    "def fibonacci(n):",
    "import numpy as np\n\ndef normalize(x):",
    "class LinkedList:\n    def __init__(self):",
    "def read_json(path):\n    with open(path) as f:",
    "for i in range(10):\n    print(",
    "import os\nimport sys\n\n\ndef main():",
    "def quicksort(arr):\n    if len(arr) <= 1:",
    "class Config(object):\n    \"\"\"Configuration for the model.\"\"\"\n",
    "    def forward(self, x):\n        x = self.conv1(x)",
    "try:\n    import torch\nexcept ImportError:",
    "def test_addition():\n    assert",
    "@property\ndef shape(self):\n    return",
    "from typing import List, Optional\n\n",
    "def parse_args():\n    parser = argparse.ArgumentParser(",
    "if __name__ == \"__main__\":\n",
    "    raise ValueError(\"",
    "def __repr__(self):\n    return f\"",
    "x = np.zeros((3, 4))\ny =",
    "# Copyright 2020 The TensorFlow Authors. All Rights Reserved.\n",
    "def _check_input(self, value):\n        if not isinstance(value,",
};

#endif
