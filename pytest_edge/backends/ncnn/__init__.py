"""ncnn: pnnx's .ncnn.param/.bin, CPU, fp16 and Vulkan variants."""
